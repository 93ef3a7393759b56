"""``Backend.embed`` of each kind: fake (in process), vllm (a pool of two replicas of the fake
upstream over real HTTP) and hosted (litellm's OpenAI provider against the fake upstream)."""

from __future__ import annotations

import math

import pytest

from backends.base import Backend
from backends.call import CallContext
from backends.config import BackendConfig
from backends.errors import BackendConnectError, BackendError, BackendRateLimited, BackendServerError
from backends.registry import build_backend
from tests.backends.fake_upstream import fake_embedding


async def _started(config: BackendConfig) -> Backend:
    backend = build_backend(config)
    await backend.start()
    return backend


def _vllm(upstream, model: str = "e5", endpoints=None) -> BackendConfig:
    return BackendConfig(name="pool", kind="vllm", model=model, task="embedding",
                         endpoints=endpoints or [upstream.v1("r1"), upstream.v1("r2")], timeout_s=10,
                         connect_timeout_s=2, options={"metrics_interval_s": 0})


def _hosted(upstream, model: str = "openai/text-embedding-3-small") -> BackendConfig:
    return BackendConfig(name="hosted", kind="hosted", model=model, task="embedding", api_base=upstream.v1(),
                         api_key="sk-test", timeout_s=10, connect_timeout_s=2)


async def test_fake_vectors_are_deterministic_unit_vectors_of_the_configured_size():
    backend = await _started(BackendConfig(name="e", kind="fake", model="emb", task="embedding",
                                           options={"embedding_dimensions": 12}))
    out = await backend.embed({"model": "emb", "input": ["hello world", "other", [1, 2, 3]]})
    vectors = [d["embedding"] for d in out["data"]]
    assert [d["index"] for d in out["data"]] == [0, 1, 2] and out["object"] == "list"
    assert all(len(v) == 12 and math.isclose(sum(x * x for x in v), 1.0, rel_tol=1e-5) for v in vectors)
    assert vectors[0] != vectors[1]
    again = await backend.embed({"model": "emb", "input": "hello world", "dimensions": 5})
    assert len(again["data"][0]["embedding"]) == 5
    assert (await backend.embed({"model": "emb", "input": "hello world"}))["data"][0]["embedding"] == vectors[0]
    # 11 characters -> 3 estimated tokens, 5 -> 2, three token ids -> 3
    assert out["usage"] == {"prompt_tokens": 8, "total_tokens": 8}


async def test_fake_embedding_failures_follow_the_model_name():
    backend = await _started(BackendConfig(name="e", kind="fake", model="emb-error-429", task="embedding"))
    with pytest.raises(BackendRateLimited):
        await backend.embed({"input": "x"})


async def test_a_kind_without_embeddings_says_so(tmp_path):
    data = tmp_path / "tiny.csv"
    data.write_text('prompt,model-a\n"Say hello",True\n')
    backend = build_backend(BackendConfig(name="rp", kind="replay", model="model-a", data=[data]))
    with pytest.raises(BackendError, match="does not serve embeddings") as info:
        await backend.embed({"input": "x"})
    assert info.value.code == "embeddings_unsupported"


async def test_vllm_pool_posts_embeddings_to_a_replica(upstream, upstream_state):
    backend = await _started(_vllm(upstream))
    try:
        out = await backend.embed({"model": "e5", "input": ["a b c", "d"], "dimensions": 3, "user": "u1",
                                   "truncate_prompt_tokens": 8}, context=CallContext(tenant="t", prefix_hash="h"))
    finally:
        await backend.aclose()
    seen = upstream_state.requests[-1]
    assert seen["path"] in ("/r1/v1/embeddings", "/r2/v1/embeddings")
    # what the client sent, the call's context beside it; vLLM's own fields pass through
    assert seen["body"] == {"model": "e5", "input": ["a b c", "d"], "dimensions": 3, "user": "u1",
                            "truncate_prompt_tokens": 8}
    assert [d["embedding"] for d in out["data"]] == [fake_embedding("a b c", 3), fake_embedding("d", 3)]
    assert out["usage"]["prompt_tokens"] == 4


async def test_vllm_pool_spreads_embeddings_over_its_replicas(upstream, upstream_state):
    backend = await _started(_vllm(upstream))
    try:
        for i in range(4):
            await backend.embed({"model": "e5", "input": f"text {i}"})
    finally:
        await backend.aclose()
    assert {r["replica"] for r in upstream_state.requests} == {"r1", "r2"}


async def test_vllm_embedding_errors_are_translated(upstream, upstream_state):
    backend = await _started(_vllm(upstream, model="e5-error-500"))
    try:
        with pytest.raises(BackendServerError):
            await backend.embed({"model": "e5-error-500", "input": "x"})
    finally:
        await backend.aclose()


async def test_vllm_embedding_retries_another_replica_on_connect_error(upstream, upstream_state):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    backend = await _started(_vllm(upstream, endpoints=[dead, upstream.v1("r1")]))
    try:
        for _ in range(2):  # whichever replica the pool picks first, the live one answers
            out = await backend.embed({"model": "e5", "input": "x"})
            assert out["data"][0]["embedding"] == fake_embedding("x")
    finally:
        await backend.aclose()
    dead_only = await _started(_vllm(upstream, endpoints=[dead]))
    try:
        with pytest.raises(BackendConnectError):
            await dead_only.embed({"model": "e5", "input": "x"})
    finally:
        await dead_only.aclose()


async def test_vllm_malformed_embedding_answer_is_an_upstream_fault(upstream, upstream_state):
    backend = await _started(_vllm(upstream, model="e5-html"))
    try:
        with pytest.raises(BackendServerError):
            await backend.embed({"model": "e5-html", "input": "x"})
    finally:
        await backend.aclose()


async def test_hosted_embeds_through_litellm(upstream, upstream_state):
    backend = await _started(_hosted(upstream))
    out = await backend.embed({"model": "ignored", "input": ["a b", "c"], "dimensions": 3, "user": "u1",
                               "api_base": "http://127.0.0.1:9/v1", "mock_response": [0.0]})
    seen = upstream_state.requests[-1]
    assert seen["path"] == "/v1/embeddings"
    assert seen["headers"]["authorization"] == "Bearer sk-test"
    # the client cannot redirect the call or mock the answer; the backend's model is asked
    assert seen["body"] == {"model": "text-embedding-3-small", "input": ["a b", "c"], "dimensions": 3, "user": "u1"}
    assert out == {"object": "list", "model": "text-embedding-3-small",
                   "data": [{"object": "embedding", "index": 0, "embedding": fake_embedding("a b", 3)},
                            {"object": "embedding", "index": 1, "embedding": fake_embedding("c", 3)}],
                   "usage": {"prompt_tokens": 3, "total_tokens": 3}}


async def test_hosted_embedding_errors_are_translated(upstream, upstream_state):
    backend = await _started(_hosted(upstream, model="openai/e-error-429"))
    with pytest.raises(BackendRateLimited):
        await backend.embed({"input": "x"})
