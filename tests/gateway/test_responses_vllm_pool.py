"""A Responses request routed to a vLLM pool (the fake OpenAI-compatible upstream over real
HTTP) reaches it as a valid Chat Completions request, and its answer, streamed or not,
comes back as a Responses object or event stream."""

from __future__ import annotations

import json

import openai
import pytest

from tests.gateway.conftest import start_pool_gateway

TOOL = {"type": "function", "name": "lookup", "description": "Look a word up",
        "parameters": {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]}}


@pytest.fixture(scope="module")
def pool(tmp_path_factory, upstream):
    gw = start_pool_gateway(tmp_path_factory.mktemp("responses-pool"), upstream)
    yield gw, upstream
    gw.stop()


def test_plain_through_the_pool(pool):
    gw, upstream = pool
    client = openai.OpenAI(base_url=gw.v1, api_key="unused", max_retries=0)
    resp = client.responses.create(model="auto", instructions="Be brief.", input="Hi pool", max_output_tokens=50,
                                   reasoning={"effort": "low"}, metadata={"k": "v"})
    assert resp.output_text == "Hello from m. You said: Hi pool" and resp.model == "m"
    sent = upstream.state.last_body
    assert sent["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi pool"}]
    assert sent["max_completion_tokens"] == 50 and sent["reasoning_effort"] == "low"
    assert "metadata" not in sent and "input" not in sent and "instructions" not in sent


def test_streamed_tool_call_through_the_pool_then_continued(pool):
    gw, upstream = pool
    client = openai.OpenAI(base_url=gw.v1, api_key="unused", max_retries=0)
    events = list(client.responses.create(model="auto", input="Define pool", tools=[TOOL], stream=True))
    assert upstream.state.last_body["tools"] == [{"type": "function", "function": {
        k: TOOL[k] for k in ("name", "description", "parameters")}}]
    assert upstream.state.last_body["stream"] is True
    done = events[-1].response
    call = done.output[0]
    assert events[-1].type == "response.completed" and call.type == "function_call" and call.name == "lookup"
    assert done.usage.input_tokens > 0
    follow = client.responses.create(model="auto", previous_response_id=done.id, tools=[TOOL], tool_choice="none",
                                     input=[{"type": "function_call_output", "call_id": call.call_id,
                                             "output": "a body of water"}])
    sent = upstream.state.last_body["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool"]
    assert sent[1]["tool_calls"][0]["id"] == call.call_id and json.loads(sent[1]["tool_calls"][0]["function"][
        "arguments"]) == json.loads(call.arguments)
    assert sent[2] == {"role": "tool", "tool_call_id": call.call_id, "content": "a body of water"}
    assert upstream.state.last_body["tool_choice"] == "none"
    assert follow.output_text
