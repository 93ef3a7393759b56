"""``POST /v1/messages`` and ``/v1/messages/count_tokens`` with the official anthropic SDK
against the real app over HTTP (demo policy, fake backends): plain, streamed, a tool-use
round trip, token counting and a system prompt with ``cache_control``; each gets a routed
answer with ``x-mixroute-*`` headers, a decision row and an outcome row."""

from __future__ import annotations

import json

import anthropic
import httpx
import openai
import pytest

from tests.gateway.conftest import wait_row

WEATHER = {"name": "get_weather", "description": "Weather for a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


@pytest.fixture
def client(demo_gateway):
    return anthropic.Anthropic(base_url=demo_gateway.url, api_key="unused", max_retries=0)


def _rows(gw, request_id: str) -> tuple[dict, dict]:
    """The decision and outcome rows of ``request_id``; signals parsed."""
    decision = wait_row(gw.settings.database_url, "decisions", request_id)
    outcome = wait_row(gw.settings.database_url, "outcomes", request_id)
    if isinstance(decision["signals"], str):
        decision["signals"] = json.loads(decision["signals"])
    return decision, outcome


def test_create_plain(client, demo_gateway):
    raw = client.messages.with_raw_response.create(model="auto", max_tokens=200, system="Answer briefly.",
                                                   messages=[{"role": "user", "content": "What is the capital of France?"}])
    msg = raw.parse()
    assert raw.headers["x-mixroute-route"] == "auto" and raw.headers["x-mixroute-backend"] == "gpt-4o-mini"
    assert raw.headers["x-mixroute-reason"] and float(raw.headers["x-mixroute-cost-usd"]) > 0
    assert msg.id.startswith("msg_") and msg.type == "message" and msg.role == "assistant"
    assert msg.model == "gpt-4o-mini" and msg.stop_reason == "end_turn" and msg.stop_sequence is None
    assert msg.content[0].type == "text" and "capital of France" in msg.content[0].text
    assert msg.usage.input_tokens > 0 and msg.usage.output_tokens > 0 and msg.usage.cache_read_input_tokens == 0
    decision, outcome = _rows(demo_gateway, raw.headers["x-mixroute-request-id"])
    assert decision["signals"]["door"] == "messages" and decision["chosen"] == "gpt-4o-mini"
    assert outcome["status"] == "ok" and outcome["tokens_in"] == msg.usage.input_tokens
    assert outcome["tokens_out"] == msg.usage.output_tokens
    assert outcome["cost_usd"] == pytest.approx(float(raw.headers["x-mixroute-cost-usd"]))


def test_stream_with_get_final_message(client, demo_gateway):
    with client.messages.stream(
            model="auto", max_tokens=200, messages=[{"role": "user", "content": "Stream me a short answer"}]) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
        headers = stream.response.headers
    assert "Stream me a short answer" in text and final.content[0].text == text
    assert final.id.startswith("msg_") and final.model == "gpt-4o-mini" and final.stop_reason == "end_turn"
    assert final.usage.input_tokens > 0 and final.usage.output_tokens > 0
    assert headers["x-mixroute-route"] == "auto" and headers["x-mixroute-backend"] == "gpt-4o-mini"
    decision, outcome = _rows(demo_gateway, headers["x-mixroute-request-id"])
    assert decision["signals"]["door"] == "messages" and decision["chosen"] == "gpt-4o-mini"
    assert outcome["status"] == "ok" and outcome["streamed"] and outcome["tokens_out"] == final.usage.output_tokens


def test_stream_events_over_http(demo_gateway):
    """The raw event sequence, as Anthropic sends it, with ``event:`` lines and headers."""
    with httpx.stream("POST", demo_gateway.v1 + "/messages", timeout=30, headers={"anthropic-version": "2023-06-01"},
                      json={"model": "auto", "max_tokens": 100, "stream": True,
                            "messages": [{"role": "user", "content": "Stream me"}]}) as resp:
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
        request_id = resp.headers["x-mixroute-request-id"]
        assert resp.headers["x-mixroute-backend"] == "gpt-4o-mini"
        events = _events(resp.iter_lines())
    kinds = [e["type"] for e in events]
    assert kinds[:3] == ["message_start", "ping", "content_block_start"]
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(kinds[3:-3]) == {"content_block_delta"}
    assert {e["delta"]["type"] for e in events[3:-3]} == {"text_delta"}
    last = events[-2]
    assert last["delta"]["stop_reason"] == "end_turn" and last["usage"]["output_tokens"] > 0
    assert last["usage"]["cost_usd"] > 0
    decision, outcome = _rows(demo_gateway, request_id)
    assert decision["signals"]["door"] == "messages"
    assert outcome["status"] == "ok" and outcome["streamed"] and outcome["tokens_out"] == last["usage"]["output_tokens"]


def _events(lines) -> list[dict]:
    """Parsed SSE events; each one's ``event:`` line must name its ``type``."""
    events, name = [], None
    for line in lines:
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            data = json.loads(line[6:])
            assert data["type"] == name
            events.append(data)
    return events


def test_tool_use_round_trip(client, demo_gateway):
    first = client.messages.with_raw_response.create(model="auto", max_tokens=200, tools=[WEATHER],
                                                     messages=[{"role": "user", "content": "Weather in Paris?"}])
    call = first.parse().content[-1]
    assert first.parse().stop_reason == "tool_use"
    assert call.type == "tool_use" and call.name == "get_weather" and call.input == {"city": "example"}
    history = [{"role": "user", "content": "Weather in Paris?"},
               {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.parse().content]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny, 21 C"}]}]
    second = client.messages.with_raw_response.create(model="auto", max_tokens=200, tools=[WEATHER], messages=history)
    answer = second.parse().content[0].text
    assert "Based on the tool result" in answer and "sunny, 21 C" in answer
    # The backend saw the same conversation as the chat door would send it.
    chat = openai.OpenAI(base_url=demo_gateway.v1, api_key="unused", max_retries=0).chat.completions.create(
        model="auto", tools=[{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                                               "parameters": WEATHER["input_schema"]}}],
        messages=[{"role": "user", "content": "Weather in Paris?"},
                  {"role": "assistant", "content": None, "tool_calls": [{"id": call.id, "type": "function", "function": {
                      "name": "get_weather", "arguments": json.dumps(call.input)}}]},
                  {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"}])
    assert chat.choices[0].message.content == answer
    for r in (first, second):
        assert r.headers["x-mixroute-route"] == "auto" and r.headers["x-mixroute-backend"] == "gpt-4o-mini"
        decision, outcome = _rows(demo_gateway, r.headers["x-mixroute-request-id"])
        assert decision["signals"]["door"] == "messages" and outcome["status"] == "ok"
        assert outcome["cost_usd"] == pytest.approx(float(r.headers["x-mixroute-cost-usd"])) and outcome["cost_usd"] > 0


def test_a_tool_name_too_long_for_chat_comes_back_whole(client):
    # Anthropic takes tool names of up to 128 characters, OpenAI's chat API 64.
    tool = {**WEATHER, "name": "get_the_weather_" + "x" * 90}
    body = {"model": "auto", "max_tokens": 50, "tools": [tool], "messages": [{"role": "user", "content": "Weather?"}]}
    assert client.messages.create(**body).content[-1].name == tool["name"]
    with client.messages.stream(**body) as stream:
        assert stream.get_final_message().content[-1].name == tool["name"]


def test_tool_use_streamed(client):
    with client.messages.stream(model="auto", max_tokens=200, tools=[WEATHER], tool_choice={"type": "any"},
                                messages=[{"role": "user", "content": "Weather in Paris?"}]) as stream:
        kinds = [(e.type, getattr(getattr(e, "delta", None), "type", None)) for e in stream]
        final = stream.get_final_message()
    assert ("content_block_delta", "input_json_delta") in kinds
    block = final.content[-1]
    assert block.type == "tool_use" and block.name == "get_weather" and block.input == {"city": "example"}
    assert final.stop_reason == "tool_use"


def test_count_tokens(client, demo_gateway):
    body = {"model": "auto", "system": "Answer briefly.",
            "messages": [{"role": "user", "content": "What is the capital of France?"}]}
    raw = client.messages.with_raw_response.count_tokens(**body)
    counted = raw.parse().input_tokens
    # Not routed (nothing is dispatched or billed): the route it names, no backend.
    assert raw.headers["x-mixroute-route"] == "auto" and raw.headers["x-mixroute-request-id"]
    assert "x-mixroute-backend" not in raw.headers and raw.headers["x-mixroute-cost-usd"] == "0"
    # Still a request the gateway answered: its decision and outcome rows, marked so that the
    # readers of routed answers (what-if, eval, learning) skip it.
    decision, outcome = _rows(demo_gateway, raw.headers["x-mixroute-request-id"])
    assert decision["endpoint"] == decision["reason"] == "count_tokens" and decision["pinned"]
    assert decision["signals"]["input_tokens"] == counted and "prompt_hash" not in decision["signals"]
    assert outcome["status"] == "ok" and outcome["cost_usd"] == 0 and not outcome["tokens_in"]
    # The fake backend bills the prompt with the router's estimate: the counts agree.
    assert counted == client.messages.create(max_tokens=50, **body).usage.input_tokens > 0
    # Tool definitions are billed as prompt tokens too.
    assert client.messages.count_tokens(tools=[WEATHER], **body).input_tokens > counted
    longer = client.messages.count_tokens(**{**body, "messages": [{"role": "user", "content": "word " * 400}]})
    assert longer.input_tokens > counted + 300


def test_count_tokens_refuses_an_embedding_model(demo_gateway):
    # Checked like the Messages request it counts for: an embedding model serves no messages.
    embedders = [m["id"] for m in httpx.get(demo_gateway.v1 + "/models").json()["data"] if "embed" in m["id"]]
    assert embedders, "the demo policy has an embedding backend"
    resp = httpx.post(demo_gateway.v1 + "/messages/count_tokens",
                      json={"model": embedders[0], "messages": [{"role": "user", "content": "hi"}]})
    assert resp.status_code == 400, resp.text
    assert resp.json()["type"] == "error" and "embedding model" in resp.json()["error"]["message"]


def test_system_prompt_with_cache_control(client, demo_gateway):
    system = [{"type": "text", "text": "You are a terse geography tutor. " * 20, "cache_control": {"type": "ephemeral"}}]
    raw = client.messages.with_raw_response.create(model="auto", max_tokens=100, system=system,
                                                   messages=[{"role": "user", "content": "Capital of Peru?"}])
    msg = raw.parse()
    assert raw.headers["x-mixroute-backend"] and "Capital of Peru?" in msg.content[0].text
    assert raw.headers["x-mixroute-route"] == "auto" and raw.headers["x-mixroute-reason"]
    decision, outcome = _rows(demo_gateway, raw.headers["x-mixroute-request-id"])
    assert decision["signals"]["door"] == "messages" and decision["prefix_hash"]
    assert outcome["status"] == "ok" and outcome["cost_usd"] == pytest.approx(float(raw.headers["x-mixroute-cost-usd"]))


def test_metadata_user_id_is_a_session(client, demo_gateway):
    raw = client.messages.with_raw_response.create(model="auto", max_tokens=50, metadata={"user_id": "user-42"},
                                                   messages=[{"role": "user", "content": "Hello there"}])
    decision, _ = _rows(demo_gateway, raw.headers["x-mixroute-request-id"])
    session = decision["signals"].get("session") or {}
    assert session.get("explicit") is True and session["id"] == "metadata.user_id:user-42", decision["signals"]
    routed = httpx.post(demo_gateway.v1 + "/route", json={"model": "auto", "max_tokens": 50, "metadata": {
        "user_id": "user-42"}, "messages": [{"role": "user", "content": "Hello there"}]}, params={"dialect": "messages"})
    assert routed.json()["signals"]["session"]["id"] == "metadata.user_id:user-42"


def test_openapi_declares_the_bodies(demo_gateway):
    paths = httpx.get(demo_gateway.url + "/openapi.json", timeout=10).json()["paths"]
    body = paths["/v1/messages"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert {"model", "messages", "max_tokens"} <= set(body["required"])
    assert "$ref" not in json.dumps(body)  # inlined: nothing points into a missing components section
    blocks = json.dumps(body["properties"]["messages"])
    assert all(f'"{kind}"' in blocks for kind in ("text", "image", "document", "tool_use", "tool_result"))
    counted = paths["/v1/messages/count_tokens"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert "max_tokens" not in counted["properties"] and "messages" in counted["required"]


def test_a_breakpoint_in_the_conversation_bounds_the_stable_prefix(client, demo_gateway):
    contract = {"type": "text", "text": "Clause: the tenant pays rent monthly. " * 60, "cache_control": {"type": "ephemeral"}}
    rows = []
    for question in ("Who pays?", "How often?"):
        raw = client.messages.with_raw_response.create(model="auto", max_tokens=50, system="Answer from the contract.",
                                                       messages=[{"role": "user", "content": [contract]},
                                                                 {"role": "assistant", "content": "Read it."},
                                                                 {"role": "user", "content": question}])
        rows.append(_rows(demo_gateway, raw.headers["x-mixroute-request-id"])[0])
    first, second = rows
    # Same prefix (system and the contract up to its breakpoint) whatever is asked after it...
    assert first["prefix_hash"] == second["prefix_hash"]
    # ...so the second request expects its backend's cache to hold the contract.
    candidates = second["candidates"] if isinstance(second["candidates"], list) else json.loads(second["candidates"])
    chosen = next(c for c in candidates if c["backend"] == second["chosen"])
    assert chosen["expected_cached_tokens"] > len(contract["text"]) // 4 - 10


def test_a_coding_agent_turn(demo_gateway):
    """The shape coding agents built on the Messages API send: ``?beta=true``, beta headers,
    system and tool breakpoints, extended thinking, a replayed thinking block and a tool
    result, streamed."""
    tool = {**WEATHER, "name": "Bash", "cache_control": {"type": "ephemeral"}}
    body = {
        "model": "auto", "max_tokens": 32000, "stream": True, "metadata": {"user_id": "user_abc_session_1"},
        "thinking": {"type": "enabled", "budget_tokens": 31999}, "tools": [tool],
        "system": [{"type": "text", "text": "You are a coding agent."},
                   {"type": "text", "text": "Work in /repo.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "List the files."}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "I should run ls.", "signature": "sig-1"},
                {"type": "tool_use", "id": "toolu_01", "name": "Bash", "input": {"city": "ls"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01", "content": [{"type": "text", "text": "a.py b.py"}]},
                {"type": "text", "text": "Now summarise.", "cache_control": {"type": "ephemeral"}}]}]}
    headers = {"anthropic-version": "2023-06-01", "anthropic-beta": "interleaved-thinking-2025-05-14,"
               "fine-grained-tool-streaming-2025-05-14", "x-api-key": "unused"}
    with httpx.stream("POST", demo_gateway.v1 + "/messages", params={"beta": "true"}, json=body, headers=headers,
                      timeout=30) as resp:
        assert resp.status_code == 200, resp.read()
        events = _events(resp.iter_lines())
        request_id = resp.headers["x-mixroute-request-id"]
    assert events[0]["type"] == "message_start" and events[-1]["type"] == "message_stop"
    decision, outcome = _rows(demo_gateway, request_id)
    assert decision["signals"]["session"]["id"] == "metadata.user_id:user_abc_session_1"
    assert outcome["status"] == "ok"
