"""A Messages request routed to a vLLM pool (the fake OpenAI-compatible upstream over real
HTTP) reaches it as a valid Chat Completions request, and its answer, streamed or not,
comes back as a Messages object or as valid Anthropic events."""

from __future__ import annotations

import json

import anthropic
import httpx
import pytest
from openai.types.chat import completion_create_params
from pydantic import TypeAdapter

from tests.gateway.conftest import start_pool_gateway

TOOL = {"name": "lookup", "description": "Look a word up",
        "input_schema": {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]}}
CHAT_REQUEST = TypeAdapter(completion_create_params.CompletionCreateParamsStreaming
                           | completion_create_params.CompletionCreateParamsNonStreaming)


@pytest.fixture(scope="module")
def pool(tmp_path_factory, upstream):
    gw = start_pool_gateway(tmp_path_factory.mktemp("messages-pool"), upstream)
    yield gw, upstream, anthropic.Anthropic(base_url=gw.url, api_key="unused", max_retries=0)
    gw.stop()


def _sent(upstream) -> dict:
    """The body the replica received, checked against the openai SDK's request types."""
    body = upstream.state.last_body
    CHAT_REQUEST.validate_python(body)
    return body


def test_plain_through_the_pool(pool):
    gw, upstream, client = pool
    msg = client.messages.create(
        model="auto", max_tokens=50, system=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        messages=[{"role": "user", "content": [{"type": "text", "text": "Hi pool"}]}], stop_sequences=["END"],
        metadata={"user_id": "u-7"},
        # Sampling fields: in the API, no longer parameters of this SDK's create().
        extra_body={"temperature": 0.3, "top_p": 0.9, "top_k": 5})
    assert msg.content[0].text == "Hello from m. You said: Hi pool" and msg.model == "m"
    assert msg.usage.input_tokens > 0 and msg.usage.output_tokens == 7  # words answered
    sent = _sent(upstream)
    assert sent["messages"][0]["role"] == "system" and sent["messages"][0]["content"][0]["text"] == "Be brief."
    assert sent["messages"][1] == {"role": "user", "content": [{"type": "text", "text": "Hi pool"}]}
    assert sent["max_tokens"] == 50 and sent["stop"] == ["END"] and sent["temperature"] == 0.3
    assert sent["top_p"] == 0.9 and sent["top_k"] == 5 and sent["user"] == "u-7"
    assert not {"system", "metadata", "stop_sequences", "thinking"} & sent.keys()


def test_streamed_events_through_the_pool_are_anthropic_events(pool):
    gw, upstream, client = pool
    with httpx.stream("POST", gw.v1 + "/messages", timeout=30, json={
            "model": "auto", "max_tokens": 50, "stream": True,
            "messages": [{"role": "user", "content": "Stream through the pool"}]}) as resp:
        raw = [line for line in resp.iter_lines()]
    assert _sent(upstream)["stream"] is True
    events = [json.loads(line[6:]) for line in raw if line.startswith("data: ")]
    names = [line[7:] for line in raw if line.startswith("event: ")]
    assert names == [e["type"] for e in events]
    assert names[0] == "message_start" and names[-1] == "message_stop"
    # Each event parses as the anthropic SDK's own event type.
    parsed = [TypeAdapter(anthropic.types.RawMessageStreamEvent).validate_python(e) for e in events if e["type"] != "ping"]
    text = "".join(e.delta.text for e in parsed if e.type == "content_block_delta")
    assert text == "Hello from m. You said: Stream through the pool"
    assert parsed[-2].usage.output_tokens == len(text.split()) and parsed[-2].usage.input_tokens == 4


def test_streamed_tool_use_through_the_pool_then_the_result(pool):
    gw, upstream, client = pool
    with client.messages.stream(model="auto", max_tokens=50, tools=[TOOL], tool_choice={"type": "any"},
                                messages=[{"role": "user", "content": "Define pool"}]) as stream:
        final = stream.get_final_message()
    sent = _sent(upstream)
    assert sent["tools"] == [{"type": "function", "function": {"name": "lookup", "description": "Look a word up",
                                                               "parameters": TOOL["input_schema"]}}]
    assert sent["tool_choice"] == "required" and sent["stream"] is True
    call = final.content[-1]
    assert final.stop_reason == "tool_use" and call.type == "tool_use" and call.input == {"word": "example"}
    answer = client.messages.create(model="auto", max_tokens=50, tools=[TOOL], tool_choice={"type": "none"}, messages=[
        {"role": "user", "content": "Define pool"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": call.id, "name": call.name, "input": call.input}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "a body of water"},
                                     {"type": "text", "text": "Thanks"}]}])
    sent = _sent(upstream)
    assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "tool", "user"]
    assert sent["messages"][1]["tool_calls"][0]["id"] == call.id
    assert json.loads(sent["messages"][1]["tool_calls"][0]["function"]["arguments"]) == {"word": "example"}
    assert sent["messages"][2] == {"role": "tool", "tool_call_id": call.id, "content": "a body of water"}
    assert sent["tool_choice"] == "none"
    assert answer.content[0].text == "Hello from m. You said: Thanks"


def test_a_text_document_reaches_the_pool_as_text(pool):
    gw, upstream, client = pool
    client.messages.create(model="auto", max_tokens=50, messages=[{"role": "user", "content": [
        {"type": "document", "title": "Notes", "source": {"type": "text", "media_type": "text/plain",
                                                          "data": "Pools hold water."}},
        {"type": "text", "text": "Summarise"}]}])
    parts = _sent(upstream)["messages"][0]["content"]
    assert "Pools hold water." in parts[0]["text"] and parts[-1]["text"] == "Summarise"


def _vllm_stopped_app():
    """A replica that stops on the client's first stop sequence and says so in the choice's
    ``stop_reason``, as vLLM does."""
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse, StreamingResponse
    from starlette.routing import Route

    async def chat(request):
        body = await request.json()
        matched = body["stop"][0]
        base = {"id": "chatcmpl-v", "created": 1, "model": body["model"]}
        if not body.get("stream"):
            return JSONResponse({**base, "object": "chat.completion", "choices": [{
                "index": 0, "message": {"role": "assistant", "content": "Up to"}, "finish_reason": "stop",
                "stop_reason": matched}], "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}})

        async def events():
            chunk = {**base, "object": "chat.completion.chunk"}
            for delta, finish in (({"role": "assistant", "content": "Up to"}, None), ({}, "stop")):
                choice = {"index": 0, "delta": delta, "finish_reason": finish, "stop_reason": matched if finish else None}
                yield f"data: {json.dumps({**chunk, 'choices': [choice]})}\n\n"
            usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
            yield f"data: {json.dumps({**chunk, 'choices': [], 'usage': usage})}\n\ndata: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


def test_the_stop_sequence_that_ended_the_answer(tmp_path):
    from tests.backends.fake_upstream import serve_in_thread

    replica = serve_in_thread(app=_vllm_stopped_app())
    gw = start_pool_gateway(tmp_path, replica)
    try:
        client = anthropic.Anthropic(base_url=gw.url, api_key="unused", max_retries=0)
        body = {"model": "auto", "max_tokens": 20, "stop_sequences": ["###", "END"],
                "messages": [{"role": "user", "content": "Count"}]}
        msg = client.messages.create(**body)
        assert (msg.stop_reason, msg.stop_sequence) == ("stop_sequence", "###")
        with client.messages.stream(**body) as stream:
            final = stream.get_final_message()
        assert (final.stop_reason, final.stop_sequence) == ("stop_sequence", "###")
        assert final.content[0].text == "Up to"
    finally:
        gw.stop()
        replica.stop()


def test_a_coding_agent_turn_reaches_the_pool_as_chat(pool):
    gw, upstream, client = pool
    with client.messages.stream(
            model="auto", max_tokens=2000, thinking={"type": "enabled", "budget_tokens": 1024}, tools=[TOOL],
            system=[{"type": "text", "text": "You are a coding agent.", "cache_control": {"type": "ephemeral"}}],
            messages=[{"role": "user", "content": "Define pool"},
                      {"role": "assistant", "content": [
                          {"type": "thinking", "thinking": "Look it up.", "signature": "sig"},
                          {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"word": "pool"}}]},
                      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                                    "content": [{"type": "text", "text": "water"}]}]}]) as stream:
        final = stream.get_final_message()
    sent = _sent(upstream)
    assert [m["role"] for m in sent["messages"]] == ["system", "user", "assistant", "tool"]
    assert sent["messages"][3] == {"role": "tool", "tool_call_id": "toolu_1", "content": "water"}
    assert sent["reasoning_effort"] and "thinking" not in sent
    assert final.stop_reason == "tool_use" and final.content[-1].name == "lookup"
