"""``POST /v1/embeddings`` through the real gateway (uvicorn, SQLite store) with the official
``openai`` SDK and httpx: the demo policy's embedding backend, a route of embedding backends
with fallback, a vLLM pool of the fake upstream, budgets, and bad input."""

from __future__ import annotations

import base64
import time
from array import array

import httpx
import openai
import pytest

from gateway.auth.keys import create_key
from gateway.store.db import make_engine, upgrade
from tests.backends.fake_upstream import fake_embedding
from tests.gateway.conftest import start_gateway, wait_row

DEMO_MODEL = "text-embedding-3-small"

POLICY = """version: 1
default_route: auto
backends:
  - {name: chat, kind: fake, model: chat-model, quality: 0.9, pricing: {input_per_1m: 1, output_per_1m: 1}}
  - {name: emb-broken, kind: fake, model: e-error-500, task: embedding, pricing: {input_per_1m: 0.01, output_per_1m: 0}}
  - {name: emb-cheap, kind: fake, model: e-cheap, task: embedding, options: {embedding_dimensions: 8},
     pricing: {input_per_1m: 0.02, output_per_1m: 0}}
  - {name: emb-dear, kind: fake, model: e-dear, task: embedding, pricing: {input_per_1m: 0.13, output_per_1m: 0}}
  - {name: emb-priced, kind: fake, model: e-priced, task: embedding, pricing: {input_per_1m: 1000, output_per_1m: 0}}
routes:
  - {name: auto, backends: [chat]}
  - {name: embed, backends: [emb-dear, emb-cheap]}
  - {name: embed-fallback, backends: [emb-dear, emb-broken, emb-cheap], max_attempts: 2}
  - {name: embed-priced, backends: [emb-priced]}
"""


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    gw = start_gateway(tmp_path_factory.mktemp("embed"), POLICY)
    yield gw
    gw.stop()


def _post(gw, body: dict, headers: dict | None = None, path: str = "/embeddings") -> httpx.Response:
    return httpx.post(gw.v1 + path, json=body, headers=headers or {}, timeout=30)


def test_openai_sdk_embeddings_create_against_the_demo_policy(demo_gateway):
    client = openai.OpenAI(base_url=demo_gateway.v1, api_key="unused", max_retries=0)
    raw = client.embeddings.with_raw_response.create(model=DEMO_MODEL, input=["first text", "second one"])
    result = raw.parse()
    assert raw.headers["x-mixroute-backend"] == DEMO_MODEL and raw.headers["x-mixroute-route"] == DEMO_MODEL
    assert raw.headers["x-mixroute-reason"] == "pinned"
    assert [len(d.embedding) for d in result.data] == [1536, 1536] and result.model == DEMO_MODEL
    assert result.usage.prompt_tokens == result.usage.total_tokens == 3 + 3  # 10 characters -> 3 tokens each
    cost = float(raw.headers["x-mixroute-cost-usd"])
    assert cost == pytest.approx(6 * 0.02 / 1e6)
    request_id = raw.headers["x-mixroute-request-id"]
    decision = wait_row(demo_gateway.settings.database_url, "decisions", request_id)
    assert decision["endpoint"] == "embeddings" and decision["chosen"] == DEMO_MODEL and decision["pinned"]
    outcome = wait_row(demo_gateway.settings.database_url, "outcomes", request_id)
    assert outcome["status"] == "ok" and outcome["backend"] == DEMO_MODEL
    assert outcome["tokens_in"] == 6 and outcome["tokens_out"] == 0
    assert outcome["cost_usd"] == pytest.approx(cost)
    # the SDK asked for base64 (its default) and decoded it: the same numbers as floats
    floats = client.embeddings.create(model=DEMO_MODEL, input=["first text", "second one"], encoding_format="float")
    assert [d.embedding for d in floats.data] == [d.embedding for d in result.data]
    assert DEMO_MODEL in {m.id for m in client.models.list().data}


def test_base64_decodes_to_the_same_floats(gateway):
    for inputs in (["hello", "world"], [[1, 2, 3], [4]], [5, 6, 7]):
        body = {"model": "emb-cheap", "input": inputs}
        floats = _post(gateway, {**body, "encoding_format": "float"}).json()
        encoded = _post(gateway, {**body, "encoding_format": "base64"})
        assert encoded.status_code == 200, encoded.text
        assert len(floats["data"]) == len(encoded.json()["data"]) == (1 if inputs[0] == 5 else 2)
        for plain, packed in zip(floats["data"], encoded.json()["data"]):
            assert isinstance(packed["embedding"], str)
            assert array("f", base64.b64decode(packed["embedding"])).tolist() == plain["embedding"]
            assert len(plain["embedding"]) == 8
    assert _post(gateway, {**body, "dimensions": 3}).json()["data"][0]["embedding"].__len__() == 3


def test_a_route_sends_to_its_cheapest_embedding_backend(gateway):
    r = _post(gateway, {"model": "embed", "input": "some words to embed"})
    assert r.status_code == 200, r.text
    assert r.headers["x-mixroute-backend"] == "emb-cheap" and r.headers["x-mixroute-reason"] == "cheapest"
    decision = wait_row(gateway.settings.database_url, "decisions", r.headers["x-mixroute-request-id"])
    assert decision["route"] == "embed" and decision["chosen"] == "emb-cheap"
    assert decision["fallbacks"] == ["emb-dear"] or decision["fallbacks"] == '["emb-dear"]'
    assert r.json()["model"] == "e-cheap"


def test_fallback_to_the_next_embedding_backend(gateway):
    r = _post(gateway, {"model": "embed-fallback", "input": "fall back please"})
    assert r.status_code == 200, r.text
    # cheapest first: emb-broken (500), then emb-cheap; max_attempts 2 leaves emb-dear out
    assert r.headers["x-mixroute-backend"] == "emb-cheap" and r.headers["x-mixroute-fallbacks"] == "emb-broken"
    outcome = wait_row(gateway.settings.database_url, "outcomes", r.headers["x-mixroute-request-id"])
    assert outcome["backend"] == "emb-cheap" and "emb-broken" in str(outcome["fallbacks_taken"])
    assert outcome["cost_usd"] == pytest.approx(outcome["tokens_in"] * 0.02 / 1e6)


def test_tasks_do_not_mix(gateway):
    chat_on_embeddings = _post(gateway, {"model": "auto", "input": "x"})
    assert chat_on_embeddings.status_code == 400
    error = chat_on_embeddings.json()["error"]
    assert error["param"] == "model" and error["code"] == "model_task_mismatch" and "embed" in error["message"]
    for model in ("emb-cheap", "embed"):
        r = _post(gateway, {"model": model, "messages": [{"role": "user", "content": "hi"}]}, path="/chat/completions")
        assert r.status_code == 400 and r.json()["error"]["param"] == "model", r.text
        assert "/v1/embeddings" in r.json()["error"]["message"]
    unknown = _post(gateway, {"model": "nope", "input": "x"})
    assert unknown.status_code == 404 and unknown.json()["error"]["param"] == "model"
    models = {m["id"]: m["mixroute"]["task"] for m in httpx.get(gateway.v1 + "/models").json()["data"]}
    assert models["embed"] == models["emb-cheap"] == "embedding" and models["auto"] == models["chat"] == "chat"


@pytest.mark.parametrize(("body", "param"), [
    ({"model": "embed"}, "input"),
    ({"model": "embed", "input": ""}, "input"),
    ({"model": "embed", "input": []}, "input"),
    ({"model": "embed", "input": 5}, "input"),
    ({"model": "embed", "input": {"text": "x"}}, "input"),
    ({"model": "embed", "input": ["a", ""]}, "input.1"),
    ({"model": "embed", "input": ["a", 3]}, "input.1"),
    ({"model": "embed", "input": [1, "a"]}, "input.1"),
    ({"model": "embed", "input": [1, -2]}, "input.1"),
    ({"model": "embed", "input": [[1, 2], []]}, "input.1"),
    ({"model": "embed", "input": [[1, 2], [3, 1.5]]}, "input.1.1"),
    ({"model": "embed", "input": [None]}, "input.0"),
    ({"model": "embed", "input": ["x"] * 2049}, "input"),
    ({"model": "embed", "input": "x", "encoding_format": "int8"}, "encoding_format"),
    ({"model": "embed", "input": "x", "dimensions": 0}, "dimensions"),
    ({"model": "embed", "input": "x", "dimensions": "8"}, "dimensions"),
    ({"model": "embed", "input": "x", "user": 7}, "user"),
    ({"model": "embed", "input": "x", "stream": True}, "stream"),
    ({"input": "x"}, "model"),
    ({"model": 3, "input": "x"}, "model"),
])
def test_bad_input_is_a_400_naming_the_param(gateway, body, param):
    r = _post(gateway, body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error", error


def test_bad_json_bodies_get_the_openai_envelope(gateway):
    r = httpx.post(gateway.v1 + "/embeddings", content=b"[1, 2]", headers={"content-type": "application/json"})
    assert r.status_code == 400 and set(r.json()["error"]) == {"message", "type", "param", "code"}
    assert _post(gateway, {"model": "embed", "input": ["x"] * 2048}).status_code == 200


def test_budgets_count_embedding_spend(tmp_path):
    db = f"sqlite:///{tmp_path}/keys.db"
    engine = make_engine(db)
    upgrade(engine)
    key, _ = create_key(engine, tenant="rag", budget_usd=0.15, period="day")
    engine.dispose()
    gw = start_gateway(tmp_path, POLICY, database_url=db)
    try:
        auth = {"authorization": f"Bearer {key}"}
        body = {"model": "embed-priced", "input": "x" * 400}  # 100 tokens at 1000 USD per 1M: 0.1 USD
        codes = []
        for _ in range(3):
            r = _post(gw, body, auth)
            codes.append(r.status_code)
            if r.status_code == 200:
                assert float(r.headers["x-mixroute-cost-usd"]) == pytest.approx(0.1)
            time.sleep(0.3)  # settlement runs in the background; a request is refused once the spend reaches it
        assert codes == [200, 200, 429], codes
        assert r.json()["error"]["code"] == "budget_exceeded"
    finally:
        gw.stop()


def test_a_vllm_pool_serves_embeddings_through_the_gateway(tmp_path, upstream):
    upstream.state.reset()
    policy = f"""version: 1
backends:
  - {{name: chat, kind: fake, model: chat-model}}
  - {{name: pool, kind: vllm, model: bge-m3, task: embedding, endpoints: ["{upstream.v1('r1')}", "{upstream.v1('r2')}"],
     options: {{metrics_interval_s: 0}}, pricing: {{input_per_1m: 0.01, output_per_1m: 0}}}}
routes:
  - {{name: auto, backends: [chat]}}
"""
    gw = start_gateway(tmp_path, policy)
    try:
        client = openai.OpenAI(base_url=gw.v1, api_key="unused", max_retries=0)
        raw = client.embeddings.with_raw_response.create(model="pool", input=["one two", "three"], dimensions=3,
                                                         extra_body={"truncate_prompt_tokens": 16})
        result = raw.parse()
        assert [d.embedding for d in result.data] == [fake_embedding("one two", 3), fake_embedding("three", 3)]
        seen = upstream.state.requests[-1]
        assert seen["path"] in ("/r1/v1/embeddings", "/r2/v1/embeddings")
        # floats asked upstream whatever the client asked (the SDK asks base64): the gateway encodes
        assert seen["body"] == {"model": "bge-m3", "input": ["one two", "three"], "dimensions": 3,
                                "truncate_prompt_tokens": 16}
        outcome = wait_row(gw.settings.database_url, "outcomes", raw.headers["x-mixroute-request-id"])
        assert outcome["tokens_in"] == 3 and outcome["cost_usd"] == pytest.approx(3 * 0.01 / 1e6)
    finally:
        gw.stop()


def test_huge_dimensions_get_a_400_not_a_dead_gateway():
    from gateway.doors.embeddings import MAX_DIMENSIONS, check_body
    import pytest as _pytest
    from router.errors import InvalidRequest

    with _pytest.raises(InvalidRequest, match="dimensions"):
        check_body({"model": "text-embedding-3-small", "input": "a", "dimensions": 1_000_000_000})
    check_body({"model": "text-embedding-3-small", "input": "a", "dimensions": MAX_DIMENSIONS})
