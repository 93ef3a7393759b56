"""The Messages door's refusals: Anthropic's envelope ``{"type": "error", "error": {"type",
"message"}}`` with Anthropic's status codes, a one-line message naming the field, never a
500; also for auth failures, unreadable bodies and backend errors."""

from __future__ import annotations

import json

import anthropic
import httpx
import pytest

from gateway.auth.keys import create_key
from gateway.store.db import make_engine, upgrade
from tests.gateway.conftest import start_gateway

USER = {"role": "user", "content": "hi"}
CALL = {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}]}


def _post(url: str, body: dict, headers: dict | None = None, path: str = "/messages") -> httpx.Response:
    return httpx.post(url + path, json=body, headers=headers or {}, timeout=30)


def _error(resp: httpx.Response, status: int, type_: str) -> str:
    body = resp.json()
    assert resp.status_code == status, resp.text
    assert body["type"] == "error" and set(body) == {"type", "error"} and body["error"]["type"] == type_
    message = body["error"]["message"]
    assert message and "\n" not in message and "Traceback" not in message
    return message


@pytest.mark.parametrize(("body", "words"), [
    ({"messages": [USER, {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_9"}]}]},
     "messages.1.content.0.tool_use_id"),
    ({"messages": [USER, CALL, {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_2"}]}]},
     "messages.2.content.0.tool_use_id"),
    ({"messages": [{"role": "user", "content": [{"type": "hologram", "data": "x"}]}]}, "messages.0.content.0.type"),
    ({"messages": [{"role": "system", "content": "Be brief."}, USER]}, "messages.0.role"),
    ({"messages": [USER], "response_format": {"type": "json_object"}}, "response_format"),
    ({"messages": [USER], "n": 2}, "n"),
    ({"messages": [USER], "max_completion_tokens": 5}, "max_completion_tokens"),
    ({"messages": [USER], "max_tokens": None}, "max_tokens"),
    ({"messages": [USER], "max_tokens": "5"}, "max_tokens"),
    ({"messages": [USER], "max_tokens": 0}, "max_tokens"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]}]},
     "messages.0.content.0.type"),
    ({"messages": [{"role": "assistant", "content": [{"type": "image", "source": {}}]}]}, "messages.0.content.0.type"),
    ({"messages": [USER], "temperature": 1.5}, "temperature"),
    ({"messages": [USER], "tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools.0.type"),
    ({"messages": [USER], "tools": [{"name": "f"}]}, "tools.0.input_schema"),
    ({"messages": [USER], "tool_choice": {"type": "sometimes"}}, "tool_choice.type"),
    ({"messages": [USER], "tool_choice": {"type": "tool"}}, "tool_choice"),
    ({"messages": [USER], "tools": [{"name": "f", "input_schema": {"type": "object"}}],
      "tool_choice": {"type": "tool", "name": "g"}}, "tool_choice.name"),
    ({"messages": [USER], "thinking": {"type": "enabled", "budget_tokens": 10}}, "thinking.budget_tokens"),
    ({"messages": [USER], "thinking": {"type": "enabled"}}, "thinking: budget_tokens is required"),
    ({"messages": [{"role": "user", "content": 3}]}, "messages.0.content"),
    ({"messages": [USER], "system": [{"type": "image", "source": {}}]}, "system"),
    ({"messages": [USER, CALL, USER]}, "messages.2.content"),
    ({"messages": [USER, {"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}},
        {"type": "tool_use", "id": "toolu_2", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_2", "content": "x"}]}]},
     "messages.2.content"),
    ({"messages": [{"role": "user", "content": []}]}, "messages.0.content"),
    ({"messages": [{"role": "user", "content": ""}]}, "messages.0.content"),
    ({"messages": [USER, {"role": "assistant", "content": []}, USER]}, "messages.1.content"),
    ({"messages": [{"role": "user", "content": [{"type": "text"}]}]}, "messages.0.content.0.text"),
    ({"messages": [{"role": "user", "content": [{"text": "no type"}]}]}, "messages.0.content.0"),
    ({"messages": [{"role": "user", "content": ["a string"]}]}, "messages.0.content.0"),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}, "messages.0.content.0.source"),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {
        "type": "base64", "media_type": "image/tiff", "data": "AAAA"}}]}]}, "messages.0.content.0.source.media_type"),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "file", "file_id": "f"}}]}]},
     "messages.0.content.0.source"),
    ({"messages": [{"role": "user", "content": [{"type": "document", "source": {"type": "bogus"}}]}]},
     "messages.0.content.0.source"),
    ({"messages": [USER, {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f",
                                                          "input": "not an object"}]}]}, "messages.1.content.0.input"),
    ({"messages": [USER], "tools": [{"name": "f", "input_schema": {"type": "string"}}]}, "tools.0.input_schema.type"),
    ({"messages": [USER], "tools": [{"name": "f", "input_schema": {"properties": {}}}]}, "tools.0.input_schema.type"),
    ({"messages": [USER], "tools": [{"name": "f", "input_schema": []}]}, "tools.0.input_schema"),
    ({"messages": [USER], "logprobs": True}, "logprobs"),
    ({"messages": [USER], "stop": ["x"]}, "stop"),
    ({"messages": [USER], "stream": "yes"}, "stream"),
    ({"messages": [USER], "top_k": -1}, "top_k"),
    ({"messages": [USER], "stop_sequences": "END"}, "stop_sequences"),
    ({"messages": [USER], "metadata": {"user_id": 42}}, "metadata.user_id"),
    ({"messages": [USER], "tools": [{"name": "get weather", "input_schema": {"type": "object"}}]}, "tools.0.name"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": "x", "cache_control": {"type": "forever"}}]}]},
     "messages.0.content.0.cache_control.type"),
])
def test_refusals_name_the_field(demo_gateway, body, words):
    resp = _post(demo_gateway.v1, {"model": "auto", "max_tokens": 10, **body} if "max_tokens" not in body or
                 body["max_tokens"] is not None else {"model": "auto", "messages": body["messages"]})
    message = _error(resp, 400, "invalid_request_error")
    assert message.startswith(words), message


@pytest.mark.parametrize("body", [
    {"messages": [USER], "system": [{"type": "text", "text": "Be brief."},
                                    {"type": "text", "text": "Really.", "cache_control": {"type": "ephemeral"}}]},
    {"messages": [USER], "system": []},
    {"messages": [USER], "stop_sequences": [], "top_k": 3, "temperature": 0.5, "top_p": 0.9},
    {"messages": [USER], "thinking": {"type": "enabled", "budget_tokens": 2048}},
    {"messages": [USER], "thinking": {"type": "disabled"}},
    {"messages": [USER], "metadata": {"user_id": "u-1"}, "service_tier": "auto"},
    {"messages": [USER, {"role": "assistant", "content": "The answer is"}]},  # a prefill
    {"messages": [USER, {"role": "assistant", "content": []}]},
    {"messages": [{"role": "user", "content": [{"type": "document", "title": "Memo", "source": {
        "type": "content", "content": [{"type": "text", "text": "Rent is due monthly."}]}},
        {"type": "text", "text": "When is rent due?"}]}]},
    {"messages": [{"role": "user", "content": [{"type": "image", "source": {
        "type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}, {"type": "text", "text": "What?"}]}]},
    {"messages": [USER, CALL, {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "is_error": True, "content": "boom"}]}]},
])
def test_odd_but_valid_bodies_are_answered(demo_gateway, body):
    resp = _post(demo_gateway.v1, {"model": "auto", "max_tokens": 20, **body})
    assert resp.status_code == 200, resp.text
    assert resp.json()["type"] == "message" and resp.json()["content"]


def test_a_content_source_document_reaches_the_backend_as_text(demo_gateway):
    routed = httpx.post(demo_gateway.v1 + "/route", params={"dialect": "messages"}, timeout=30, json={
        "model": "auto", "max_tokens": 20, "messages": [{"role": "user", "content": [
            {"type": "document", "title": "Memo", "source": {"type": "content", "content": "Rent is due monthly."}},
            {"type": "text", "text": "When is rent due?"}]}]}).json()
    parts = routed["rewritten_request"]["messages"][0]["content"]
    assert "Rent is due monthly." in json.dumps(parts)


def test_explicit_nulls_are_absent_fields(demo_gateway):
    # Found by fuzzing: litellm's translation read a tool's "type": null as a value (a 500).
    resp = _post(demo_gateway.v1, {"model": "auto", "max_tokens": 10, "system": None, "tool_choice": None,
                                   "messages": [USER], "tools": [
                                       {"name": "f", "type": None, "description": None, "cache_control": None,
                                        "input_schema": {"type": "object", "properties": {"x": {"default": None}}}}]})
    assert resp.status_code == 200, resp.text
    assert resp.json()["content"][0]["type"] == "tool_use"


def test_missing_model_and_unknown_model(demo_gateway):
    assert _error(_post(demo_gateway.v1, {"max_tokens": 5, "messages": [USER]}), 400,
                  "invalid_request_error").startswith("model")
    message = _error(_post(demo_gateway.v1, {"model": "claude-nope", "max_tokens": 5, "messages": [USER]}), 404,
                     "not_found_error")
    assert "claude-nope" in message


def test_count_tokens_refusals(demo_gateway):
    assert _error(_post(demo_gateway.v1, {"model": "auto", "messages": [{"role": "system", "content": "x"}]},
                        path="/messages/count_tokens"), 400, "invalid_request_error").startswith("messages.0.role")
    _error(_post(demo_gateway.v1, {"model": "nope", "messages": [USER]}, path="/messages/count_tokens"), 404,
           "not_found_error")


@pytest.mark.parametrize("block", [{"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
                                   {"type": "document", "source": {"type": "text", "data": "notes"}}])
def test_media_inside_a_tool_result_is_named(demo_gateway, block):
    # A tool_result becomes a chat 'tool' message, which carries text only: a one-line 400
    # naming the block, not a 500 (nor the chat body's field).
    body = {"model": "auto", "max_tokens": 10, "messages": [USER, CALL, {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "see:"}, block]}]}]}
    message = _error(_post(demo_gateway.v1, body), 400, "invalid_request_error")
    assert message.startswith("messages.2.content.0.content.1.type:") and block["type"] in message


@pytest.mark.parametrize(("content", "headers", "words"), [
    (b"{nope", {"content-type": "application/json"}, "not valid JSON"),
    (b"[1, 2]", {"content-type": "application/json"}, "JSON object"),
    (b"{}", {"content-type": "text/plain"}, "Content-Type"),
])
def test_unreadable_bodies(demo_gateway, content, headers, words):
    resp = httpx.post(demo_gateway.v1 + "/messages", content=content, headers=headers, timeout=10)
    assert words in _error(resp, 415 if "Content-Type" in words else 400, "invalid_request_error")


POLICY = """version: 1
backends:
  - {name: only, kind: fake, model: only-model, quality: 0.9, pricing: {input_per_1m: 1, output_per_1m: 1}}
routes:
  - {name: auto, backends: [only]}
"""


@pytest.fixture(scope="module")
def keyed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("messages-keys")
    db = f"sqlite:///{tmp}/keys.db"
    engine = make_engine(db)
    upgrade(engine)
    key = create_key(engine, tenant="acme")[0]
    limited = create_key(engine, tenant="acme", routes=["other"])[0]
    engine.dispose()
    gw = start_gateway(tmp, POLICY, database_url=db, max_body_bytes=4096)
    yield gw, key, limited
    gw.stop()


def test_key_from_x_api_key_or_bearer(keyed):
    gw, key, _ = keyed
    body = {"model": "auto", "max_tokens": 10, "messages": [USER]}
    versions = {"anthropic-version": "2023-06-01", "anthropic-beta": "prompt-caching-2024-07-31"}
    assert _post(gw.v1, body, {"x-api-key": key, **versions}).status_code == 200
    assert _post(gw.v1, body, {"authorization": f"Bearer {key}"}).status_code == 200
    sdk = anthropic.Anthropic(base_url=gw.url, api_key=key, max_retries=0)
    assert sdk.messages.create(**body).content[0].type == "text"
    assert sdk.messages.count_tokens(model="auto", messages=[USER]).input_tokens > 0


def test_auth_failures_in_the_anthropic_envelope(keyed):
    gw, _, limited = keyed
    body = {"model": "auto", "max_tokens": 10, "messages": [USER]}
    _error(_post(gw.v1, body), 401, "authentication_error")
    _error(_post(gw.v1, body, {"x-api-key": "mr-wrong"}), 401, "authentication_error")
    _error(_post(gw.v1, body, path="/messages/count_tokens"), 401, "authentication_error")
    _error(_post(gw.v1, body, {"x-api-key": limited}), 403, "permission_error")
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(base_url=gw.url, api_key="mr-wrong", max_retries=0).messages.create(**body)


def test_too_large_a_body_is_413(keyed):
    gw, key, _ = keyed
    body = {"model": "auto", "max_tokens": 10, "messages": [{"role": "user", "content": "x" * 5000}]}
    _error(_post(gw.v1, body, {"x-api-key": key}), 413, "request_too_large")


def test_backend_errors_in_the_anthropic_envelope(fallback_gateway):
    client = anthropic.Anthropic(base_url=fallback_gateway.url, api_key="unused", max_retries=0)
    with pytest.raises(anthropic.RateLimitError) as err:
        client.messages.create(model="all-broken", max_tokens=10, messages=[USER])
    assert err.value.body["type"] == "error" and err.value.body["error"]["type"] == "rate_limit_error"


def test_a_stream_broken_mid_way_ends_with_an_error_event(fallback_gateway):
    with httpx.stream("POST", fallback_gateway.v1 + "/messages", timeout=30, json={
            "model": "drop", "max_tokens": 100, "stream": True,
            "messages": [{"role": "user", "content": "tell me something long"}]}) as resp:
        lines = [line for line in resp.iter_lines() if line]
    assert lines[0] == "event: message_start" and lines[-2] == "event: error"
    assert '"type":"error"' in lines[-1] and "message_stop" not in "".join(lines)
    client = anthropic.Anthropic(base_url=fallback_gateway.url, api_key="unused", max_retries=0)
    with pytest.raises(anthropic.APIStatusError):
        with client.messages.stream(model="drop", max_tokens=100, messages=[USER]) as stream:
            stream.get_final_message()


TEXT_ONLY_POLICY = """version: 1
backends:
  - {name: text-only, kind: hosted, model: openai/o3-mini, api_key: sk-test, api_base: "http://127.0.0.1:9/v1"}
  - {name: seeing, kind: fake, model: gpt-4o-mini, quality: 0.9, pricing: {input_per_1m: 5, output_per_1m: 5}}
routes:
  - {name: auto, backends: [text-only]}
  - {name: mixed, backends: [text-only, seeing]}
"""


@pytest.fixture(scope="module")
def text_only(tmp_path_factory):
    gw = start_gateway(tmp_path_factory.mktemp("messages-text-only"), TEXT_ONLY_POLICY)
    yield gw
    gw.stop()


IMAGE = {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}


@pytest.mark.parametrize(("model", "content", "param"), [
    ("auto", [{"type": "text", "text": "what is it?"}, IMAGE], "messages.0.content.1"),
    ("text-only", [IMAGE], "messages.0.content.0"),
])
def test_an_image_no_backend_takes(text_only, model, content, param):
    # litellm's map says o3-mini takes no images: refused before any backend is called.
    resp = _post(text_only.v1, {"model": model, "max_tokens": 10, "messages": [{"role": "user", "content": content}]})
    message = _error(resp, 400, "invalid_request_error")
    assert message.startswith(param + ":") and "takes images" in message


def test_an_image_that_one_backend_of_the_route_takes(text_only):
    resp = _post(text_only.v1, {"model": "mixed", "max_tokens": 10, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "what is it?"}, IMAGE]}]})
    # Not refused at the door: the route has a backend that takes images, and it answers
    # (the text-only one, unreachable here, fails over to it).
    assert resp.status_code == 200, resp.text
    assert resp.headers["x-mixroute-backend"] == "seeing" and resp.json()["content"][0]["type"] == "text"


@pytest.mark.parametrize(("method", "path", "status", "type_"), [
    ("GET", "/messages", 405, "invalid_request_error"),
    ("POST", "/messages/batches", 404, "not_found_error"),
    ("GET", "/messages/count_tokens", 405, "invalid_request_error"),
])
def test_unknown_paths_and_methods_of_the_messages_api(demo_gateway, method, path, status, type_):
    resp = httpx.request(method, demo_gateway.v1 + path, json={}, timeout=10)
    assert path in _error(resp, status, type_)


def test_the_sdk_reads_a_path_the_gateway_does_not_serve_as_its_own_error(demo_gateway):
    client = anthropic.Anthropic(base_url=demo_gateway.url, api_key="unused", max_retries=0)
    with pytest.raises(anthropic.NotFoundError) as err:
        client.messages.batches.list()
    assert err.value.body == {"type": "error", "error": {"type": "not_found_error",
                                                         "message": "Unknown path /v1/messages/batches"}}
