"""vLLM-pool specifics: replica choice, retry within the pool, headers, timeouts."""

from __future__ import annotations

import asyncio
import logging
import socket

import httpx
import orjson
import pytest

from backends.config import BackendConfig
from backends.errors import (
    BackendConnectError,
    BackendRejected,
    BackendServerError,
    BackendStreamError,
    BackendTimeout,
)
from backends.vllm.backend import VllmBackend
from backends.vllm.pool import LeastLoadedChooser, Pool, Replica
from tests.backends.fake_upstream import serve_in_thread

CHAT = {"messages": [{"role": "user", "content": "hi there"}]}


def dead_url() -> str:
    """A ``/v1`` URL on 127.0.0.1 where nothing listens (connect is refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def vllm(endpoints: list[str], model: str = "m", **kw) -> VllmBackend:
    return VllmBackend(BackendConfig(name="pool", kind="vllm", model=model, endpoints=endpoints, **kw))


def test_chooser_prefers_least_in_flight():
    replicas = [Replica("a", in_flight=2), Replica("b", in_flight=0), Replica("c", in_flight=1)]
    assert LeastLoadedChooser().choose(replicas, {}).base_url == "b"


def test_chooser_breaks_ties_round_robin():
    chooser, replicas = LeastLoadedChooser(), [Replica("a"), Replica("b"), Replica("c")]
    assert [chooser.choose(replicas, {}).base_url for _ in range(6)] == list("abcabc")
    replicas[1].in_flight = 1
    assert [chooser.choose(replicas, {}).base_url for _ in range(4)] == list("acac")


def test_pool_occupy_counts_and_releases():
    pool = Pool(["http://x/v1/"])
    replica = pool.pick({})
    assert replica.base_url == "http://x/v1"
    with pytest.raises(RuntimeError), pool.occupy(replica):
        assert replica.in_flight == 1
        raise RuntimeError
    assert replica.in_flight == 0
    assert pool.pick({}, exclude=[replica]) is None


async def test_sequential_requests_alternate_replicas(upstream, upstream_state):
    backend = vllm([upstream.v1("r1"), upstream.v1("r2")])
    for _ in range(4):
        await backend.send("chat", {"model": "m", **CHAT})
    await backend.aclose()
    assert [r["replica"] for r in upstream_state.requests] == ["r1", "r2", "r1", "r2"]


async def test_open_stream_counts_as_in_flight(upstream, upstream_state):
    backend = vllm([upstream.v1("r1"), upstream.v1("r2")], model="m-slow")
    agen = backend.stream("chat", {"model": "m-slow", **CHAT})
    await agen.__anext__()
    assert [r.in_flight for r in backend.pool.replicas] == [1, 0]
    await backend.send("chat", {"model": "m", **CHAT})
    await backend.send("chat", {"model": "m", **CHAT})
    assert [r["replica"] for r in upstream_state.requests] == ["r1", "r2", "r2"]
    await agen.aclose()
    assert [r.in_flight for r in backend.pool.replicas] == [0, 0]
    await backend.aclose()


async def test_connect_error_retries_next_replica_once(upstream, upstream_state):
    backend = vllm([dead_url(), upstream.v1("r2")])
    out = await backend.send("chat", {"model": "m", **CHAT})
    assert out["object"] == "chat.completion"
    chunks = [c async for c in backend.stream("chat", {"model": "m", **CHAT})]
    assert chunks and chunks[-1]["usage"]
    assert [r["replica"] for r in upstream_state.requests] == ["r2", "r2"]
    await backend.aclose()


async def test_connect_error_gives_up_after_two_replicas(caplog):
    backend = vllm([dead_url(), dead_url(), dead_url()])
    with caplog.at_level(logging.WARNING, logger="backends.vllm.backend"):
        with pytest.raises(BackendConnectError) as info:
            await backend.send("chat", {"model": "m", **CHAT})
        assert info.value.retryable and "127.0.0.1" not in info.value.message
        with pytest.raises(BackendConnectError):
            async for _ in backend.stream("chat", {"model": "m", **CHAT}):
                pass
    assert len(caplog.records) == 4  # two replicas tried per request
    assert all(r.in_flight == 0 for r in backend.pool.replicas)
    await backend.aclose()


async def test_read_timeout_is_backend_timeout(upstream):
    backend = vllm([upstream.v1()], model="m-slow", timeout_s=0.1)
    with pytest.raises(BackendTimeout):
        await backend.send("chat", {"model": "m-slow", **CHAT})
    with pytest.raises(BackendTimeout):
        async for _ in backend.stream("chat", {"model": "m-slow", **CHAT}):
            pass
    await backend.aclose()


async def test_authorization_header_only_with_api_key(upstream, upstream_state):
    with_key = vllm([upstream.v1()], api_key="sk-pool")
    await with_key.send("chat", {"model": "m", **CHAT})
    assert upstream_state.last_headers["authorization"] == "Bearer sk-pool"
    without = vllm([upstream.v1()])
    await without.send("chat", {"model": "m", **CHAT})
    assert "authorization" not in upstream_state.last_headers
    await with_key.aclose()
    await without.aclose()


async def test_send_forces_non_streaming_body(upstream, upstream_state):
    backend = vllm([upstream.v1()])
    await backend.send("chat", {"model": "m", **CHAT, "stream": True, "stream_options": {"include_usage": True}})
    assert upstream_state.last_body["stream"] is False
    assert "stream_options" not in upstream_state.last_body
    await backend.aclose()


async def test_client_is_lazy_and_reopens_after_aclose(upstream):
    backend = vllm([upstream.v1()])
    assert (await backend.send("chat", {"model": "m", **CHAT}))["usage"]
    await backend.aclose()
    await backend.aclose()
    assert (await backend.send("chat", {"model": "m", **CHAT}))["usage"]
    await backend.aclose()


async def test_error_message_has_upstream_text_without_key():
    backend = vllm(["http://x/v1"], api_key="sk-secret-123")
    error = backend._status_error(401, b'{"error": {"message": "Incorrect API key provided: sk-secret-123"}}')
    assert error.retryable and error.code == "upstream_unavailable" and error.upstream_status == 401
    assert "Incorrect API key provided" in error.message and "sk-secret-123" not in error.message
    legacy = backend._status_error(400, b'{"object": "error", "message": "too long"}')
    assert "too long" in legacy.message
    plain = backend._status_error(503, b"overloaded", None)
    assert "Service Unavailable" in plain.message and "10-byte non-JSON body" in plain.message and plain.retryable
    empty = backend._status_error(502, b"")
    assert empty.message.endswith("HTTP 502: Bad Gateway")


def test_upstream_error_text_shows_no_hosts_or_pages():
    """Upstream error bodies reach clients without internal topology: no non-JSON bodies
    (proxies' HTML pages, with or without a BOM or a text line first), no URLs, IPv4/IPv6
    addresses or dotted host names in JSON messages; Retry-After kept for 429s only, in
    ASCII seconds, capped."""
    backend = vllm(["http://x/v1"])
    for page in (b"<html><body><h1>502 Bad Gateway</h1><hr>nginx at 10.0.0.5</body></html>",
                 "\ufeff<html>nginx at 10.0.0.5 host vllm-0.svc.cluster.local</html>".encode(),
                 b"Error\n<html>vllm-0.internal</html>", b"upstream vllm-0.internal refused"):
        error = backend._status_error(502, page)
        assert "10.0.0.5" not in error.message and "vllm-0" not in error.message and "not shown" in error.message
    named = backend._status_error(400, b'{"error": {"message": "model at http://secret-host:9/v1 (10.1.2.3:8000, '
                                       b'[fd00::1234]:8000, gpu-3.internal) rejected it at 12:30:45"}}')
    assert named.message.endswith("model at <url> (<address>, <address>, <host>) rejected it at 12:30:45")
    files = backend._status_error(404, b'{"error": {"message": "tokenizer_config.json not found on vllm-0.internal"}}')
    assert files.message.endswith("tokenizer_config.json not found on <host>")  # file names are not hosts
    assert "maximum context length is 4096 tokens" in backend._status_error(
        400, b'{"error": {"message": "This model\'s maximum context length is 4096 tokens."}}').message
    limited = backend._status_error(429, b'{"error": {"message": "slow down"}}', retry_after="7")
    assert limited.status == 429 and limited.headers == {"retry-after": "7"}
    dated = backend._status_error(429, b"busy", retry_after="Wed, 21 Oct 2015 07:28:00 GMT")
    assert dated.headers == {"retry-after": "0"}  # a date in the past: retry now
    assert backend._status_error(429, b"", retry_after="Wed, 21 Oct 2099 07:28:00 GMT").headers == {
        "retry-after": "3600"}
    for bad in ("soon", "\u00b2", "-1"):
        assert not hasattr(backend._status_error(429, b"", retry_after=bad), "headers")
    assert not hasattr(backend._status_error(503, b"", retry_after="3"), "headers")  # a 502 to the client


def test_upstream_param_and_context_code_are_kept():
    """An upstream's context_length_exceeded keeps its code and param (vLLM's older error
    object and error events too); other codes become upstream_rejected, param kept."""
    backend = vllm(["http://x/v1"])
    old = backend._status_error(400, b'{"object": "error", "message": "too long", "param": "prompt", '
                                     b'"code": "context_length_exceeded"}')
    assert (old.code, old.param) == ("context_length_exceeded", "prompt")
    event = backend._event_error({"message": "too long", "param": "messages", "code": 400}, False)
    assert (event.code, event.param) == ("upstream_rejected", "messages")
    other = backend._status_error(400, b'{"error": {"message": "bad", "param": "n", "code": "invalid_value"}}')
    assert (other.code, other.param) == ("upstream_rejected", "n")
    kept = backend._status_error(500, b'{"error": {"message": "x", "param": "messages", '
                                      b'"code": "context_length_exceeded"}}')
    assert (kept.code, kept.param) == ("upstream_server_error", None)  # only a rejection blames the request
    # vLLM itself sends code 400 (an integer): its wordings for a prompt beyond the window count
    for message in ("This model's maximum context length is 4096 tokens. However, you requested 5000 tokens.",
                    "The decoder prompt (length 9000) is longer than the maximum model length of 8192."):
        err = backend._status_error(400, orjson.dumps({"object": "error", "message": message, "code": 400}))
        assert (err.code, err.retryable) == ("context_length_exceeded", True)
        assert backend._event_error({"message": message, "code": 400}, False).code == "context_length_exceeded"


def test_stream_error_events_are_scrubbed_too():
    backend = vllm(["http://x/v1"])
    event = {"message": "CUDA OOM on 10.0.0.7 host gpu-3.internal http://10.0.0.7:8000/x", "code": 500}
    for started in (False, True):
        message = backend._event_error(event, started).message
        assert "10.0.0.7" not in message and "gpu-3" not in message and "CUDA OOM on <address>" in message


class Canned:
    """A real HTTP server answering every POST with the set ``body`` (SSE by default) and
    recording the ``cookie`` header of each request."""

    def __init__(self):
        from starlette.applications import Starlette
        from starlette.responses import Response
        from starlette.routing import Route

        self.body, self.headers, self.cookies = b"", {"content-type": "text/event-stream"}, []

        async def answer(request):
            self.cookies.append(request.headers.get("cookie"))
            return Response(self.body, headers=self.headers)

        self.server = serve_in_thread(app=Starlette(routes=[Route("/v1/{path:path}", answer, methods=["POST"])]))

    def backend(self, events: list[bytes] | None = None) -> VllmBackend:
        if events is not None:
            self.body = b"".join(events)
        return VllmBackend(BackendConfig(name="p", kind="vllm", model="m", endpoints=[self.server.v1()],
                                         options={"metrics_interval_s": 0}))


@pytest.fixture(scope="module")
def canned():
    server = Canned()
    yield server
    server.server.stop()


CHUNK = b'data: {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "hi"}}]}\n\n'


@pytest.mark.parametrize("event", [
    b'data: {"error": {"message": "KV cache full", "type": "BadRequestError", "code": 400}}\n\n',
    b'data: {"object": "error", "message": "KV cache full", "code": 400}\n\n',
])
async def test_error_event_before_first_chunk_uses_its_code(canned, event):
    backend = canned.backend([event])
    with pytest.raises(BackendRejected, match="KV cache full"):
        async for _ in backend.stream("chat", {"model": "m", **CHAT}):
            pass
    await backend.aclose()


async def test_error_event_or_bad_data_after_first_chunk_is_stream_error(canned):
    for tail in (b'data: {"error": {"message": "engine died"}}\n\n', b"data: {not json\n\n"):
        backend = canned.backend([CHUNK, tail])
        got = []
        with pytest.raises(BackendStreamError):
            async for chunk in backend.stream("chat", {"model": "m", **CHAT}):
                got.append(chunk)
        assert len(got) == 1
        await backend.aclose()


async def test_stream_without_done_needs_a_finish_reason(canned):
    finish = CHUNK.replace(b'"delta": {"content": "hi"}', b'"delta": {}, "finish_reason": "stop"')
    backend = canned.backend([CHUNK, finish])
    assert len([c async for c in backend.stream("chat", {"model": "m", **CHAT})]) == 2
    await backend.aclose()
    cut = canned.backend([CHUNK, CHUNK])
    with pytest.raises(BackendStreamError, match="DONE"):
        async for _ in cut.stream("chat", {"model": "m", **CHAT}):
            pass
    await cut.aclose()
    empty = canned.backend([])
    with pytest.raises(BackendServerError):
        async for _ in empty.stream("chat", {"model": "m", **CHAT}):
            pass
    await empty.aclose()


async def test_stream_text_split_inside_a_character_and_crlf(canned):
    """Multi-byte characters and CRLF line ends survive however the body is cut into reads."""
    event = 'data: {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "h\u00e9 \u4f60\u597d \U0001f600"}, "finish_reason": "stop"}]}\r\n\r\ndata: [DONE]\r\n\r\n'
    backend = canned.backend([event.encode()])
    chunks = [c async for c in backend.stream("chat", {"model": "m", **CHAT})]
    assert chunks[0]["choices"][0]["delta"]["content"] == "h\u00e9 \u4f60\u597d \U0001f600"
    await backend.aclose()


async def test_upstream_cookies_are_not_kept(canned) -> None:
    """One session serves every tenant: a replica's Set-Cookie must not come back on later requests."""
    canned.cookies.clear()
    canned.body = b'{"id": "x", "object": "chat.completion", "choices": [{"index": 0, "message": {"content": "hi"}}]}'
    canned.headers = {"content-type": "application/json", "set-cookie": "session=tenant-a; Path=/"}
    backend = canned.backend()
    try:
        for _ in range(2):
            await backend.send("chat", {"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    finally:
        await backend.aclose()
        canned.headers = {"content-type": "text/event-stream"}
    assert canned.cookies == [None, None]


@pytest.mark.parametrize("body, problem", [
    (b'{"id": "x", "object": "chat.completion"}', "'choices' is missing"),
    (b'{"choices": "nope"}', "'choices' is missing or not a non-empty list"),
    (b'{"choices": ["x"]}', "a choice is not an object"),
    (b'{"choices": [{"index": 0, "message": "hi"}]}', "'message' is not an object"),
    (b'{"choices": [{"index": 0, "message": {"content": 5}}]}', "'message.content' is not a string"),
    (b'{"choices": [{"index": 0, "message": {"content": "hi"}}], "usage": {"prompt_tokens": "a"}}',
     "'usage.prompt_tokens' is not a non-negative integer"),
    (b'{"choices": [{"index": 0, "message": {"content": "hi"}}], "usage": {"completion_tokens": -1}}',
     "'usage.completion_tokens'"),
    (b'{"choices": [{"index": 0, "message": {"content": null, "tool_calls": "x"}}]}', "'message.tool_calls'"),
])
async def test_malformed_answers_are_upstream_errors(canned, body, problem):
    """What the gateway reads of an answer must have the OpenAI shape: else a 502-class
    error naming the problem (not a crash further on)."""
    canned.body, canned.headers = body, {"content-type": "application/json"}
    backend = canned.backend()
    try:
        with pytest.raises(BackendServerError, match="malformed answer") as info:
            await backend.send("chat", {"model": "m", **CHAT})
        assert problem in info.value.message
    finally:
        canned.headers = {"content-type": "text/event-stream"}
        await backend.aclose()


@pytest.mark.parametrize("chunk", [
    b'{"choices": [{"index": 0, "delta": "str"}]}',
    b'{"choices": "x"}',
    b'{"choices": [{"index": 0, "delta": {"content": ["a"]}}]}',
    b'{"choices": [], "usage": {"prompt_tokens": "a"}}',
])
async def test_malformed_chunks_are_stream_errors(canned, chunk):
    for events, error in (([b"data: " + chunk + b"\n\n"], BackendServerError),
                          ([CHUNK, b"data: " + chunk + b"\n\n"], BackendStreamError)):
        backend = canned.backend(events)
        with pytest.raises(error, match="invalid stream data"):
            async for _ in backend.stream("chat", {"model": "m", **CHAT}):
                pass
        await backend.aclose()


async def test_oversized_answers_and_stream_lines_are_refused(canned, monkeypatch):
    """An upstream cannot make the gateway buffer without bound."""
    import backends.vllm.backend as vb
    import backends.vllm.sse as sse

    monkeypatch.setattr(vb, "MAX_RESPONSE_BYTES", 1000)
    canned.headers = {"content-type": "application/json"}
    canned.body = b'{"choices": [{"index": 0, "message": {"content": "' + b"x" * 2000 + b'"}}]}'
    backend = canned.backend()
    try:
        with pytest.raises(BackendServerError, match="larger than"):
            await backend.send("chat", {"model": "m", **CHAT})
    finally:
        canned.headers = {"content-type": "text/event-stream"}
        await backend.aclose()
    monkeypatch.setattr(sse, "MAX_LINE_CHARS", 1000)
    monkeypatch.setattr(sse.sse_lines, "__defaults__", (1000,))
    backend = canned.backend([CHUNK, b"data: " + b"y" * 5000])
    got = []
    with pytest.raises(BackendStreamError, match="longer than 1000"):
        async for chunk in backend.stream("chat", {"model": "m", **CHAT}):
            got.append(chunk)
    assert len(got) == 1
    await backend.aclose()


async def test_timeout_bounds_a_whole_non_streaming_call():
    """A replica that trickles its answer (a byte every 0.2 s) cannot hold a non-streaming
    request past ``timeout_s``; a stream only needs each gap under it."""
    import time

    from starlette.applications import Starlette
    from starlette.responses import StreamingResponse
    from starlette.routing import Route

    async def drip(request):
        async def body():
            for piece in (b'{"choices": [{"index": 0, "message": {"content": "', *([b"x"] * 10), b'"}}]}'):
                yield piece
                await asyncio.sleep(0.2)
        return StreamingResponse(body(), media_type="application/json")

    server = serve_in_thread(app=Starlette(routes=[Route("/v1/{path:path}", drip, methods=["POST"])]))
    backend = VllmBackend(BackendConfig(name="p", kind="vllm", model="m", endpoints=[server.v1()], timeout_s=0.7,
                                        options={"metrics_interval_s": 0}))
    try:
        start = time.monotonic()
        with pytest.raises(BackendTimeout):
            await backend.send("chat", {"model": "m", **CHAT})
        assert time.monotonic() - start < 1.5  # the whole drip takes 2.4 s
    finally:
        await backend.aclose()
        server.stop()


def test_gateway_passes_on_the_upstream_retry_after(upstream, tmp_path):
    """A rate-limited vLLM upstream's Retry-After reaches the client when no other
    candidate answers (429 from a pinned backend)."""
    from tests.gateway.conftest import start_gateway

    policy = f"""version: 1
backends:
  - {{name: pool, kind: vllm, model: m-error-429, endpoints: ["{upstream.v1()}"], options: {{metrics_interval_s: 0}}}}
routes:
  - {{name: auto, backends: [pool]}}
"""
    gw = start_gateway(tmp_path, policy)
    try:
        resp = httpx.post(gw.v1 + "/chat/completions", json={"model": "pool", **CHAT})
    finally:
        gw.stop()
    assert resp.status_code == 429 and resp.headers["retry-after"] == "3"
    assert resp.json()["error"]["code"] == "upstream_rate_limited"


@pytest.mark.parametrize("stream", [False, True])
def test_gateway_passes_on_an_upstream_context_length_exceeded(upstream, tmp_path, stream):
    """The client gets OpenAI's envelope, param and code included, from a vllm and a hosted backend."""
    from tests.gateway.conftest import start_gateway

    policy = f"""version: 1
backends:
  - {{name: pool, kind: vllm, model: m-error-context, endpoints: ["{upstream.v1()}"],
     options: {{metrics_interval_s: 0}}}}
  - {{name: hosted, kind: hosted, model: openai/m-error-context, api_base: "{upstream.v1()}", api_key: sk-test,
     pricing: {{input_per_1m: 1, output_per_1m: 1}}}}
routes:
  - {{name: auto, backends: [pool, hosted]}}
"""
    gw = start_gateway(tmp_path, policy)
    try:
        answers = [httpx.post(gw.v1 + "/chat/completions", json={"model": name, "stream": stream, **CHAT})
                   for name in ("pool", "hosted")]
    finally:
        gw.stop()
    for resp in answers:
        assert resp.status_code == 400, resp.text
        error = resp.json()["error"]
        assert (error["type"], error["param"], error["code"]) == (
            "invalid_request_error", "messages", "context_length_exceeded"), error
        assert "maximum context length is 8192 tokens" in error["message"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_leaving_before_the_answer_cancels_the_upstream_call(tmp_path, stream):
    """A client that gives up while the replica is still generating (before the first byte)
    makes the gateway close the upstream connection, so vLLM stops generating; the outcome
    says client_disconnected."""
    import threading
    import time

    import sqlalchemy as sa
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from tests.gateway.conftest import start_gateway

    seen: dict[str, float] = {}
    gone = threading.Event()

    async def busy(request):
        seen["start"] = time.monotonic()
        for _ in range(150):  # "generates" for up to 3 s, watching its connection
            if await request.is_disconnected():
                seen["gone"] = time.monotonic()
                gone.set()
                break
            await asyncio.sleep(0.02)
        return JSONResponse({"choices": [{"index": 0, "message": {"content": "late"}}]})

    server = serve_in_thread(app=Starlette(routes=[Route("/v1/{path:path}", busy, methods=["POST"])]))
    policy = f"""version: 1
backends:
  - {{name: pool, kind: vllm, model: m, endpoints: ["{server.v1()}"], options: {{metrics_interval_s: 0}}}}
routes:
  - {{name: auto, backends: [pool]}}
"""
    gw = start_gateway(tmp_path, policy)
    try:
        with pytest.raises(httpx.ReadTimeout):
            with httpx.Client(timeout=httpx.Timeout(10, read=0.4)) as client:
                r = client.post(gw.v1 + "/chat/completions", json={"model": "pool", "stream": stream, **CHAT})
                r.read()
        assert gone.wait(2.0), "the upstream never saw its connection close"
        assert seen["gone"] - seen["start"] < 1.5
        engine = sa.create_engine(gw.settings.database_url)
        deadline = time.monotonic() + 5
        row = None
        while row is None and time.monotonic() < deadline:
            with engine.connect() as conn:
                row = conn.execute(sa.text("SELECT status, http_status, streamed FROM outcomes")).mappings().first()
            time.sleep(0.05)
        assert row is not None and row["status"] == "client_disconnected" and row["http_status"] == 499
        assert bool(row["streamed"]) is stream
    finally:
        gw.stop()
        server.stop()


async def test_a_replica_that_drops_connections_is_ejected(canned):
    """A replica that accepts connections and closes them without answering counts as
    failing (no answer at all), so it is ejected and requests go to the healthy one; such a
    request is not resent (it may have reached the replica)."""
    async def drop(reader, writer):
        await reader.read(100)
        writer.close()

    server = await asyncio.start_server(drop, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    canned.body = b'{"choices": [{"index": 0, "message": {"content": "ok"}}]}'
    canned.headers = {"content-type": "application/json"}
    backend = VllmBackend(BackendConfig(name="p", kind="vllm", model="m",
                                        endpoints=[f"http://127.0.0.1:{port}/v1", canned.server.v1()],
                                        options={"metrics_interval_s": 0, "eject_after": 2, "affinity": False}))
    try:
        results = []
        for _ in range(8):
            try:
                results.append((await backend.send("chat", {"model": "m", **CHAT}))["choices"][0]["message"]["content"])
            except BackendServerError:
                results.append("dropped")
        assert results.count("dropped") == 2 and results[-4:] == ["ok"] * 4
        assert not backend.pool.replicas[0].healthy
    finally:
        canned.headers = {"content-type": "text/event-stream"}
        await backend.aclose()
        server.close()
