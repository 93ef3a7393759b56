"""The Messages stream encoder on canonical chunks: reasoning, text and tool calls become
content blocks in order, each event parses as the anthropic SDK's own type, and the SDK's
accumulator rebuilds the message from them. Also the non-streamed rendering of the same."""

from __future__ import annotations

import json

import anthropic
from anthropic.lib.streaming._messages import accumulate_event
from pydantic import TypeAdapter

from backends.errors import BackendStreamError
from gateway.doors.base import DoorCall, Rendered
from gateway.doors.messages import MESSAGES
from gateway.doors.messages_stream import MessagesEncoder

EVENT = TypeAdapter(anthropic.types.RawMessageStreamEvent)


def _chunk(delta: dict, finish: str | None = None) -> dict:
    return {"id": "c", "object": "chat.completion.chunk", "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def _events(raw: bytes) -> list[dict]:
    events = []
    for block in raw.decode().split("\n\n"):
        if block:
            name, data = block.split("\n")
            events.append(json.loads(data.removeprefix("data: ")))
            assert name == "event: " + events[-1]["type"]
    return events


def _run(chunks: list[dict], usage: dict) -> list[dict]:
    enc = MessagesEncoder("msg_1", "m")
    out = b"".join(enc.chunk(c) for c in chunks)
    out += enc.usage({"choices": []}, usage) + enc.done()
    return _events(out)


def test_reasoning_text_and_two_tool_calls():
    events = _run([
        _chunk({"role": "assistant", "content": ""}),
        _chunk({"reasoning_content": "Think"}), _chunk({"reasoning_content": "ing."}),
        _chunk({"content": "Let me look."}),
        _chunk({"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                                "function": {"name": "find", "arguments": '{"q": '}}]}),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"x"}'}}]}),
        _chunk({"tool_calls": [{"index": 1, "id": "call_b", "type": "function",
                                "function": {"name": "open", "arguments": "{}"}}]}),
        _chunk({}, "tool_calls"),
    ], {"prompt_tokens": 12, "completion_tokens": 9, "prompt_tokens_details": {"cached_tokens": 4}, "cost_usd": 0.5})
    kinds = [(e["type"], e.get("index")) for e in events if e["type"] != "content_block_delta"]
    assert kinds == [("message_start", None), ("ping", None),
                     ("content_block_start", 0), ("content_block_stop", 0),
                     ("content_block_start", 1), ("content_block_stop", 1),
                     ("content_block_start", 2), ("content_block_stop", 2),
                     ("content_block_start", 3), ("content_block_stop", 3),
                     ("message_delta", None), ("message_stop", None)]
    snapshot, bufs = None, {}
    for e in events:
        if e["type"] != "ping":
            snapshot = accumulate_event(event=EVENT.validate_python(e), current_snapshot=snapshot, json_bufs=bufs)
    thinking, text, first, second = snapshot.content
    assert thinking.type == "thinking" and thinking.thinking == "Thinking."
    assert text.text == "Let me look."
    assert (first.id, first.name, first.input) == ("call_a", "find", {"q": "x"})
    assert (second.id, second.name, second.input) == ("call_b", "open", {})
    assert snapshot.stop_reason == "tool_use"
    assert snapshot.usage.output_tokens == 9 and snapshot.usage.input_tokens == 8
    assert snapshot.usage.cache_read_input_tokens == 4
    assert events[-2]["usage"]["cost_usd"] == 0.5


def test_an_empty_answer_still_opens_and_closes_the_message():
    events = _run([], {"prompt_tokens": 3, "completion_tokens": 0})
    assert [e["type"] for e in events] == ["message_start", "ping", "message_delta", "message_stop"]
    assert events[-2]["delta"]["stop_reason"] == "end_turn"


def test_a_length_cut_and_an_error():
    events = _run([_chunk({"content": "Once"}), _chunk({}, "length")], {"prompt_tokens": 3, "completion_tokens": 1})
    assert events[-2]["delta"]["stop_reason"] == "max_tokens"
    enc = MessagesEncoder("msg_2", "m")
    enc.chunk(_chunk({"content": "Once"}))
    error = _events(enc.error(BackendStreamError("upstream closed the stream")))
    assert error == [{"type": "error", "error": {"type": "api_error", "message": "upstream closed the stream"}}]


def test_a_rendered_answer_with_reasoning_and_a_tool_call_is_a_valid_message():
    response = {"id": "c", "object": "chat.completion", "created": 1, "model": "m", "choices": [{
        "index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": "Let me look.", "reasoning_content": "Because.",
            "tool_calls": [{"id": "call_a", "type": "function", "function": {"name": "find", "arguments": '{"q": 1}'}}]}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13,
                  "prompt_tokens_details": {"cached_tokens": 6}}}
    call = DoorCall(endpoint="chat", body={}, extra={"message_id": "msg_9"})
    rendered = MESSAGES.render(response, call, Rendered("r", "b", "m", 0.25))
    # Anthropic's usage fields only: the cost is in the x-mixroute-cost-usd header.
    assert set(rendered["usage"]) == {"input_tokens", "output_tokens", "cache_read_input_tokens",
                                      "cache_creation_input_tokens"}
    message = anthropic.types.Message.model_validate(rendered)
    assert message.id == "msg_9" and message.stop_reason == "tool_use"
    assert [b.type for b in message.content] == ["thinking", "text", "tool_use"]
    assert message.content[0].thinking == "Because." and message.content[2].input == {"q": 1}
    assert (message.usage.input_tokens, message.usage.cache_read_input_tokens, message.usage.output_tokens) == (4, 6, 3)
