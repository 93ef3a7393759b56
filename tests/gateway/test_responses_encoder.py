"""The Responses door without a server: its shapes against the openai SDK's own pydantic
types (validated, not just constructed), the stream encoder over any chunking (Hypothesis),
and which request fields reach the chat body."""

from __future__ import annotations

import typing

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.responses import Response, ResponseStreamEvent

from backends.call import CallReport
from backends.errors import BackendServerError
from gateway.doors.base import DoorCall, Rendered
from gateway.doors.responses import RESPONSES
from gateway.doors.responses_input import responses_param, translate
from gateway.doors.responses_stream import ResponsesEncoder

EVENTS = {typing.get_args(cls.model_fields["type"].annotation)[0]: cls
          for cls in typing.get_args(typing.get_args(ResponseStreamEvent)[0])}
"""The SDK's event classes by their ``type``."""
ECHO = translate({"model": "auto", "input": "hi", "tools": [{"type": "function", "name": "f"}]}, []).echo


def _events(data: bytes) -> list[dict]:
    out = []
    for block in data.decode().split("\n\n"):
        if not block.strip():
            continue
        event, payload = block.split("\n")
        out.append(orjson.loads(payload.removeprefix("data: ")))
        assert event == "event: " + out[-1]["type"]
    return out


def _chunk(delta: dict, finish: str | None = None) -> dict:
    return {"id": "c", "object": "chat.completion.chunk", "model": "m-real",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def test_a_rendered_response_validates_as_the_sdks_response():
    call = DoorCall(endpoint="chat", body={}, extra={"response_id": "resp_1", "echo": ECHO})
    chat = {"model": "m-real", "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": "Let me look.", "reasoning_content": "The user wants f.", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12,
                  "prompt_tokens_details": {"cached_tokens": 2}}}
    call.report = CallReport(cache_write_tokens=3)
    body = RESPONSES.render(chat, call, Rendered(request_id="mr-1", backend="b", model="m", cost_usd=0.5))
    # The cost is in the x-mixroute-cost-usd header, not in OpenAI's usage object.
    assert "cost_usd" not in body["usage"] and body["usage"]["input_tokens_details"]["cache_write_tokens"] == 3
    resp = Response.model_validate(body)
    assert resp.output_text == "Let me look." and resp.output[2].call_id == "call_1"
    assert resp.output[0].type == "reasoning" and resp.output[0].content[0].text == "The user wants f."
    assert resp.usage.input_tokens_details.cached_tokens == 2 and resp.usage.total_tokens == 12
    assert resp.model == "m-real" and call.extra["request_id"] == "mr-1"


words = st.lists(st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=6),
                 max_size=8)
calls = st.lists(st.tuples(st.sampled_from(["f", "g"]), st.lists(st.sampled_from(['{"a"', ': 1', '}', ' ']),
                                                                  max_size=4)), max_size=3)


@settings(max_examples=60, deadline=None)
@given(thoughts=words, text=words, tool_calls=calls, failed=st.booleans(), key=st.sampled_from(
    ["reasoning_content", "reasoning"]))
def test_any_chunking_gives_a_valid_ordered_event_stream(thoughts, text, tool_calls, failed, key):
    enc = ResponsesEncoder("resp_1", ECHO, "m")
    out = b"".join(enc.chunk(_chunk({key: w})) for w in thoughts)
    out += b"".join(enc.chunk(_chunk({"content": w})) for w in text)
    for k, (name, parts) in enumerate(tool_calls):
        out += enc.chunk(_chunk({"tool_calls": [{"index": k, "id": f"call_{k}", "type": "function",
                                                 "function": {"name": name, "arguments": ""}}]}))
        out += b"".join(enc.chunk(_chunk({"tool_calls": [{"index": k, "function": {"arguments": p}}]}))
                        for p in parts)
    out += enc.chunk(_chunk({}, "tool_calls" if tool_calls else "stop"))
    out += enc.usage({}, {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7, "cost_usd": 0.1})
    out += enc.error(BackendServerError("boom", backend="b")) if failed else enc.done()
    events = _events(out)
    for event in events:
        EVENTS[event["type"]].model_validate(event)  # every event is the SDK's, fields and all
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["type"] for e in events[:2]] == ["response.created", "response.in_progress"]
    final = events[-1]["response"]
    assert events[-1]["type"] == ("response.failed" if failed else "response.completed")
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert deltas == "".join(text)
    assert "".join(e["delta"] for e in events if e["type"] == "response.reasoning_text.delta") == "".join(thoughts)
    # (a stream that fails before its first delta has no output item at all)
    assert bool(final["output"] and final["output"][0]["type"] == "reasoning") == bool(thoughts)
    added = [e["item"]["id"] for e in events if e["type"] == "response.output_item.added"]
    assert added == [i["id"] for i in final["output"]]
    if not failed:
        done = [e["item"]["id"] for e in events if e["type"] == "response.output_item.done"]
        assert done == added  # every item closed, in order
        resp = Response.model_validate(final)
        assert resp.output_text == "".join(text) and resp.usage.total_tokens == 7
        assert [(i.name, i.arguments) for i in resp.output if i.type == "function_call"] == \
            [(name, "".join(parts)) for name, parts in tool_calls]
        assert final == {**enc.final, "completed_at": final["completed_at"]}


def test_unknown_fields_pass_through_and_responses_only_ones_do_not():
    body = translate({"model": "auto", "input": "hi", "top_k": 5, "prompt": None, "conversation": None,
                      "include": ["reasoning.encrypted_content"], "truncation": "auto", "store": False,
                      "metadata": {"a": "b"}, "stream": False, "previous_response_id": None}, []).body
    assert body == {"model": "auto", "messages": [{"role": "user", "content": "hi"}], "top_k": 5}


def test_chat_fields_are_named_as_the_responses_request_has_them():
    """A chat rule broken after translation is reported at the client's own field."""
    history = [{"type": "message", "role": "user", "content": "earlier"}]
    items = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Let me look."},
             {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
             {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{}"},
             {"type": "function_call_output", "call_id": "c1", "output": "x"},
             {"type": "function_call_output", "call_id": "c2", "output": "y"}]
    parsed = translate({"model": "auto", "instructions": "Be brief.", "input": items}, history)
    # chat: 0 system (instructions), 1 history, 2 input.0, 3 input.1 with both calls, 4 and 5 outputs
    assert [m["role"] for m in parsed.body["messages"]] == ["system", "user", "user", "assistant", "tool", "tool"]
    expected = {"messages.0.content": "instructions", "messages.1.content": "previous_response_id",
                "messages.2.content": "input.0.content", "messages.3.content": "input.1.content",
                "messages.3.tool_calls.0.function.name": "input.2.name",
                "messages.3.tool_calls.1.function.arguments": "input.3.arguments",
                "messages.3.tool_calls.1.id": "input.3.call_id", "messages.5.content": "input.5.content",
                "messages": "input", "max_completion_tokens": "max_output_tokens",
                "response_format.json_schema.schema": "text.format.schema", "reasoning_effort": "reasoning.effort",
                "tools.1.function.parameters": "tools.1.parameters", "temperature": "temperature"}
    assert {chat: responses_param(chat, parsed) for chat in expected} == expected
