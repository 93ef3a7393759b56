"""The Responses door's refusals (OpenAI envelope, a ``param`` naming the field, never a
500), tenant scoping of stored responses, and routing parity with the chat door."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from gateway.auth.keys import create_key
from gateway.store.db import make_engine, upgrade
from tests.gateway.conftest import start_gateway, wait_row


def _post(gw, body: dict, key: str | None = None) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    return httpx.post(gw.v1 + "/responses", json=body, headers=headers, timeout=30)


@pytest.mark.parametrize(("body", "param", "code", "words"), [
    ({"input": [{"type": "bogus_item"}]}, "input.0.type", "unsupported_item_type", "'bogus_item'"),
    ({"input": [{"role": "tool", "content": "x"}]}, "input.0.role", "invalid_value", "'tool'"),
    ({"input": [{"role": "user", "content": [{"type": "input_audio"}]}]}, "input.0.content.0.type",
     "unsupported_content_type", "'input_audio'"),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "f"}]}, "input.0.arguments", "invalid_value",
     "arguments"),
    ({"input": "hi", "tools": [{"type": "web_search"}]}, "tools.0.type", "unsupported_tool_type", "'web_search'"),
    ({"input": "hi", "tools": [{"type": "function", "name": "f"}, {"type": "file_search"}]},
     "tools.1.type", "unsupported_tool_type", "'file_search'"),
    ({"input": "hi", "tools": [{"type": "mcp", "server_label": "x"}]}, "tools.0.type", "unsupported_tool_type", "'mcp'"),
    ({"input": "hi", "tool_choice": {"type": "web_search_preview"}}, "tool_choice", "invalid_value", "auto"),
    ({"input": "hi", "text": {"format": {"type": "yaml"}}}, "text.format.type", "invalid_value", "'yaml'"),
    ({"input": 3}, "input", "invalid_value", "string or an array"),
    ({}, "input", "missing_required_parameter", "required"),
    ({"input": "hi", "conversation": "conv_1"}, "conversation", "unsupported_parameter", "conversations"),
    ({"input": "hi", "store": "yes"}, "store", "invalid_value", "boolean"),
    ({"input": "hi", "previous_response_id": "resp_nope"}, "previous_response_id", "previous_response_not_found",
     "resp_nope"),
    # A tool's output without its call, and a call without its output (OpenAI's rules).
    ({"input": [{"role": "user", "content": "hi"}, {"type": "function_call_output", "call_id": "c9", "output": "x"}]},
     "input.1.call_id", "tool_output_without_call", "'c9'"),
    ({"input": [{"role": "user", "content": "hi"}, {"type": "function_call", "call_id": "c1", "name": "f",
                                                    "arguments": "{}"}]},
     "input.1.call_id", "tool_call_without_output", "'c1'"),
    # Fields of the other dialects, named with the Responses field to use.
    ({"input": "hi", "n": 2}, "n", "unsupported_parameter", "Chat Completions"),
    ({"input": "hi", "response_format": {"type": "json_object"}}, "response_format", "unsupported_parameter",
     "text.format"),
    ({"input": "hi", "messages": [{"role": "user", "content": "hi"}]}, "messages", "unsupported_parameter", "'input'"),
    ({"input": "hi", "max_tokens": 5}, "max_tokens", "unsupported_parameter", "max_output_tokens"),
    ({"input": "hi", "logprobs": True}, "logprobs", "unsupported_parameter", "Chat Completions"),
    # Wrong types, named by the client's own field, not the chat body's.
    ({"input": "hi", "stream": "yes"}, "stream", "invalid_value", "boolean"),
    ({"input": "hi", "parallel_tool_calls": "x"}, "parallel_tool_calls", "invalid_value", "boolean"),
    ({"input": "hi", "metadata": {"n": 1}}, "metadata", "invalid_value", "string values"),
    ({"input": "hi", "max_output_tokens": "5"}, "max_output_tokens", "invalid_value", "integer"),
    ({"input": "hi", "reasoning": {"effort": "extreme"}}, "reasoning.effort", "invalid_value", "'low'"),
    ({"input": "hi", "temperature": "hot"}, "temperature", "invalid_value", "number"),
    ({"input": [{"role": "user", "content": [{"type": "input_text"}]}]}, "input.0.content.0.text", "invalid_value",
     "'text'"),
    ({"input": "hi", "text": {"format": {"type": "json_schema", "schema": {"type": "object"}}}}, "text.format.name",
     "missing_required_parameter", "name"),
    ({"input": "hi", "text": {"format": {"type": "json_schema", "name": "x", "schema": []}}}, "text.format.schema",
     "invalid_value", "JSON Schema object"),
    ({"input": "hi", "tools": [{"type": "function", "name": "f", "parameters": {"type": "string"}}]},
     "tools.0.parameters.type", "invalid_value", "'object'"),
    ({"input": "hi", "tools": [{"type": "function", "name": "bad name!"}]}, "tools.0.name", "invalid_value",
     "bad name!"),
    ({"input": [{"role": "user", "content": "hi"}, {"type": "function_call", "call_id": "c1", "name": "f",
                                                    "arguments": 5}]}, "input.1.arguments", "invalid_value",
     "arguments"),
])
def test_refusals_name_the_field(demo_gateway, body, param, code, words):
    resp = _post(demo_gateway, {"model": "auto", **body})
    err = resp.json()["error"]
    assert resp.status_code == (404 if code == "previous_response_not_found" else 400), resp.text
    assert err["param"] == param and err["code"] == code and words in err["message"]
    assert err["type"] == "invalid_request_error"


def test_a_chat_rule_breach_after_translation_is_named_by_the_input_item(demo_gateway):
    # An image in a system message passes the door but not the chat rules: still a clear 400,
    # naming the client's item (instructions first: the chat body's message 1 is input.0).
    resp = _post(demo_gateway, {"model": "auto", "instructions": "Be brief.", "input": [{"role": "system", "content": [
        {"type": "input_image", "image_url": "https://example.com/a.png"}]}, {"role": "user", "content": "hi"}]})
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "input.0.content.0.type", resp.text


@pytest.mark.parametrize("body", [
    {"input": [{"role": "user", "content": "hi"}], "include": ["reasoning.encrypted_content"], "truncation": "auto"},
    {"input": [{"type": "message", "role": "user", "content": "hi", "id": "msg_1", "status": "completed"}]},
    {"input": [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": [
        {"type": "input_text", "text": "hi"}]}], "top_k": 4, "metadata": {}},
    {"input": [{"role": "user", "content": "hi"}, {"type": "reasoning", "id": "rs_1", "summary": []},
               {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
               {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "42"}]}],
     "tools": [{"type": "function", "name": "f", "parameters": None}]},
])
def test_odd_but_valid_bodies_are_answered(demo_gateway, body):
    resp = _post(demo_gateway, {"model": "auto", **body})
    assert resp.status_code == 200, resp.text
    assert resp.json()["status"] == "completed" and resp.json()["output"]


def test_store_false_then_get_and_delete_twice(demo_gateway):
    kept = _post(demo_gateway, {"model": "auto", "input": "hi"}).json()["id"]
    gone = _post(demo_gateway, {"model": "auto", "input": "hi", "store": False}).json()["id"]
    assert httpx.get(f"{demo_gateway.v1}/responses/{gone}").status_code == 404
    assert httpx.delete(f"{demo_gateway.v1}/responses/{gone}").status_code == 404
    first, second = (httpx.delete(f"{demo_gateway.v1}/responses/{kept}") for _ in range(2))
    assert first.status_code == 200 and first.json()["deleted"] is True
    assert second.status_code == 404 and second.json()["error"]["code"] == "not_found"


def test_unknown_path_under_responses_is_the_openai_envelope(demo_gateway):
    resp = httpx.get(demo_gateway.v1 + "/responses/resp_unknown", timeout=10)
    assert resp.status_code == 404 and resp.json()["error"]["code"] == "not_found"


POLICY = """version: 1
backends:
  - {name: only, kind: fake, model: only-model, quality: 0.9, pricing: {input_per_1m: 1, output_per_1m: 1}}
routes:
  - {name: auto, backends: [only]}
"""


@pytest.fixture(scope="module")
def tenants_gateway(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tenants")
    db = f"sqlite:///{tmp}/keys.db"
    engine = make_engine(db)
    upgrade(engine)
    keys = {name: create_key(engine, tenant=name)[0] for name in ("acme", "globex")}
    engine.dispose()
    gw = start_gateway(tmp, POLICY, database_url=db)
    yield gw, keys
    gw.stop()


def test_previous_response_of_another_tenant_is_not_found(tenants_gateway):
    gw, keys = tenants_gateway
    mine = _post(gw, {"model": "auto", "input": "acme's secret"}, keys["acme"]).json()
    assert mine["status"] == "completed"
    theirs = _post(gw, {"model": "auto", "input": "more", "previous_response_id": mine["id"]}, keys["globex"])
    unknown = _post(gw, {"model": "auto", "input": "more", "previous_response_id": "resp_" + "0" * 32},
                    keys["globex"])
    assert theirs.status_code == unknown.status_code == 404
    # The same answer as for an id that never existed: nothing tells the other tenant it exists.
    assert theirs.json()["error"]["message"].replace(mine["id"], "ID") == \
        unknown.json()["error"]["message"].replace("resp_" + "0" * 32, "ID")
    assert theirs.json()["error"]["param"] == "previous_response_id"
    auth = {"authorization": f"Bearer {keys['globex']}"}
    assert httpx.get(f"{gw.v1}/responses/{mine['id']}", headers=auth).status_code == 404
    assert httpx.delete(f"{gw.v1}/responses/{mine['id']}", headers=auth).status_code == 404
    assert httpx.get(f"{gw.v1}/responses/{mine['id']}/input_items", headers=auth).status_code == 404
    # Still there for its owner, and continued by it.
    owner = {"authorization": f"Bearer {keys['acme']}"}
    assert httpx.get(f"{gw.v1}/responses/{mine['id']}", headers=owner).json()["id"] == mine["id"]
    more = _post(gw, {"model": "auto", "input": "more", "previous_response_id": mine["id"]}, keys["acme"])
    assert more.status_code == 200 and more.json()["previous_response_id"] == mine["id"]
    row = wait_row(gw.settings.database_url, "decisions", more.headers["x-mixroute-request-id"])
    assert row["tenant"] == "acme"


def test_get_needs_a_key(tenants_gateway):
    gw, _ = tenants_gateway
    resp = httpx.get(f"{gw.v1}/responses/resp_x")
    assert resp.status_code == 401 and resp.json()["error"]["type"] == "authentication_error"


def _decision(gw, request_id: str) -> tuple[str, float]:
    """The chosen backend and its predicted quality (not its expected cost: the second of
    two requests with one prefix is priced with that prefix cached)."""
    row = wait_row(gw.settings.database_url, "decisions", request_id)
    candidates = row["candidates"] if isinstance(row["candidates"], list) else json.loads(row["candidates"])
    chosen = next(c for c in candidates if c["backend"] == row["chosen"])
    return row["chosen"], chosen["predicted_quality"]


@pytest.mark.parametrize("prompt", ["What is the capital of France?",
                                    "Prove that there are infinitely many primes, step by step."])
def test_same_prompt_same_decision_as_chat(demo_gateway, prompt):
    client = openai.OpenAI(base_url=demo_gateway.v1, api_key="unused", max_retries=0)
    chat = client.chat.completions.with_raw_response.create(model="auto", messages=[
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": prompt}])
    resp = client.responses.with_raw_response.create(model="auto", instructions="Be brief.", input=prompt)
    assert chat.headers["x-mixroute-backend"] == resp.headers["x-mixroute-backend"]
    assert chat.headers["x-mixroute-reason"] == resp.headers["x-mixroute-reason"]
    assert _decision(demo_gateway, chat.headers["x-mixroute-request-id"]) == \
        _decision(demo_gateway, resp.headers["x-mixroute-request-id"])
    assert resp.parse().output_text == chat.parse().choices[0].message.content


@pytest.mark.parametrize("raw", [[], [{"type": "reasoning", "id": "rs_1", "summary": []}]])
def test_nothing_to_answer(demo_gateway, raw):
    resp = _post(demo_gateway, {"model": "auto", "input": raw, "instructions": "Be brief."})
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "input"


def test_backend_errors_in_the_openai_envelope(fallback_gateway):
    client = openai.OpenAI(base_url=fallback_gateway.v1, api_key="unused", max_retries=0)
    with pytest.raises(openai.RateLimitError) as err:
        client.responses.create(model="all-broken", input="hi")
    assert err.value.body["code"] == "upstream_rate_limited"


def test_a_stream_broken_mid_way_ends_with_response_failed(fallback_gateway):
    client = openai.OpenAI(base_url=fallback_gateway.v1, api_key="unused", max_retries=0)
    events = list(client.responses.create(model="drop", input="tell me something long", stream=True))
    assert [e.type for e in events[-2:]] == ["error", "response.failed"]
    assert events[-2].code == "upstream_stream_error"
    failed = events[-1].response
    assert failed.status == "failed" and failed.error.code == "server_error"
    assert failed.output[0].status == "incomplete"
    with pytest.raises(RuntimeError, match="response.completed"):  # the SDK's stream helper gives up
        with client.responses.stream(model="drop", input="tell me something long") as stream:
            stream.get_final_response()
    # Nothing stored for a failed response.
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(failed.id)


TEXT_ONLY_POLICY = """version: 1
backends:
  - {name: text-only, kind: hosted, model: openai/o3-mini, api_key: sk-test, api_base: "http://127.0.0.1:9/v1"}
routes:
  - {name: auto, backends: [text-only]}
"""


def test_an_image_no_backend_takes(tmp_path):
    gw = start_gateway(tmp_path, TEXT_ONLY_POLICY)
    try:
        resp = _post(gw, {"model": "auto", "input": [{"role": "user", "content": [
            {"type": "input_text", "text": "what is it?"},
            {"type": "input_image", "image_url": "https://example.com/a.png"}]}]})
        err = resp.json()["error"]
        assert resp.status_code == 400 and err["param"] == "input.0.content.1" and "takes images" in err["message"]
    finally:
        gw.stop()
