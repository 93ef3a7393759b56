"""A fake OpenAI-compatible upstream (vLLM / provider API) served over real HTTP.

Tests fake remote providers only at the HTTP edge: the backends under test talk to this
ASGI app through a real socket, so their httpx / litellm transport code runs unchanged.

Routes: ``POST [/{replica}]/v1/chat/completions``, ``POST [/{replica}]/v1/completions`` and
``POST [/{replica}]/v1/embeddings`` (:func:`embedding_answer`).
The optional ``{replica}`` path prefix lets one server stand for several pool replicas
(``http://127.0.0.1:PORT/r1/v1``, ``.../r2/v1``); the replica that served each request is
recorded.

Behaviour by model-name suffix (as the ``fake`` backend):

- ``...-error-429`` / ``-error-500`` / ``-error-400``: that status with an OpenAI error body
  (429 with ``Retry-After: 3``).
- ``...-drop-mid-stream``: a stream sends 3 chunks then the connection is cut (no
  terminating chunk); a non-streaming answer is cut half-way through its body.
- ``...-slow``: ``SLOW_FIRST_TOKEN_S`` before the first chunk and ``SLOW_TOKEN_S`` between
  chunks (a non-streaming answer waits ``SLOW_FIRST_TOKEN_S``).
- ``...-error-context``: 400 with OpenAI's error body for a prompt beyond the context window
  (:data:`CONTEXT_ERROR`: ``param`` ``messages``, ``code`` ``context_length_exceeded``).
- ``...-error-vllm-context``: 400 with vLLM's own error body for that (:data:`VLLM_CONTEXT_ERROR`:
  no ``param``, ``code`` the integer 400).
- ``...-html``: 200 with an HTML page (a proxy's error page), streaming or not.
- ``...-extras``: a normal answer with keys that are not OpenAI's, as providers add them
  (:data:`PROVIDER_EXTRAS`, Anthropic's cache usage fields, ``citations``), and 2 cached
  prompt tokens.
- anything else: a normal answer ``"Hello from <model>. You said: <last user text>"``, or a
  call of the first offered tool when ``tools`` is given (and ``tool_choice`` is not ``none``).

Usage: ``prompt_tokens`` = words in the prompt, ``completion_tokens`` = words answered.

Use :func:`serve_in_thread` to start it (``tests/backends/conftest.py`` has a session
fixture); :class:`UpstreamState` records what the server saw.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from dataclasses import dataclass, field

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

SLOW_FIRST_TOKEN_S = 0.3
SLOW_TOKEN_S = 0.05
DROP_AFTER_CHUNKS = 3


@dataclass
class StreamRecord:
    """One streamed response as the upstream saw it: ``finished`` when it sent all of it,
    ``closed_early`` when the client went away (the body generator was cancelled/closed)."""

    model: str
    sent_chunks: int = 0
    finished: bool = False
    closed_early: bool = False
    closed: threading.Event = field(default_factory=threading.Event)


@dataclass
class UpstreamState:
    """What the fake upstream received.

    Attributes:
        requests: every request as ``{"path", "replica", "headers", "body"}``, in order.
        streams: one :class:`StreamRecord` per streamed response, in order.
    """

    requests: list[dict] = field(default_factory=list)
    streams: list[StreamRecord] = field(default_factory=list)

    @property
    def last_body(self) -> dict | None:
        """The JSON body of the last request, or ``None`` before any."""
        return self.requests[-1]["body"] if self.requests else None

    @property
    def last_headers(self) -> dict:
        return self.requests[-1]["headers"] if self.requests else {}

    def reset(self) -> None:
        self.requests.clear()
        self.streams.clear()


def _last_user_text(endpoint: str, body: dict) -> str:
    if endpoint == "completions":
        prompt = body.get("prompt", "")
        return prompt if isinstance(prompt, str) else " ".join(map(str, prompt))
    for m in reversed(body.get("messages") or []):
        if m.get("role") == "user":
            c = m.get("content")
            if isinstance(c, list):
                return " ".join(p.get("text", "") for p in c if isinstance(p, dict))
            return c or ""
    return ""


def _prompt_words(endpoint: str, body: dict) -> int:
    if endpoint == "completions":
        return len(_last_user_text(endpoint, body).split())
    return sum(len(str(m.get("content") or "").split()) for m in body.get("messages") or [])


def answer_text(model: str, endpoint: str, body: dict) -> str:
    """The text the fake upstream answers for ``body`` (tests compare against it)."""
    return f"Hello from {model}. You said: {_last_user_text(endpoint, body)}"


def _tool_call(body: dict) -> dict | None:
    tools = [t for t in body.get("tools") or [] if t.get("type") == "function"]
    if not tools or body.get("tool_choice") == "none":
        return None
    fn = tools[0]["function"]
    args = {k: "example" for k in (fn.get("parameters") or {}).get("required", [])}
    return {"id": "call_fake1", "type": "function",
            "function": {"name": fn["name"], "arguments": orjson.dumps(args).decode()}}


PROVIDER_EXTRAS = {"provider_specific_fields": {"x": 1}, "citations": ["https://example.com"]}
"""Non-OpenAI keys the ``-extras`` upstream adds to the response, each choice and each message or delta."""


def _usage(prompt: int, completion: int, model: str = "") -> dict:
    use = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
           "prompt_tokens_details": {"cached_tokens": 0}}
    if model.endswith("-extras"):
        use.update(cost=0.0001, inference_geo="us", cache_read_input_tokens=2, cache_creation_input_tokens=1,
                   prompt_tokens_details={"cached_tokens": 2, "text_tokens": prompt})
    return use


def _extras(model: str, obj: dict, part: str) -> dict:
    """``obj`` (a response or chunk) with :data:`PROVIDER_EXTRAS` added for the ``-extras`` model."""
    if not model.endswith("-extras"):
        return obj
    for choice in obj["choices"]:
        choice.update(PROVIDER_EXTRAS)
        if part in choice:
            choice[part].update(PROVIDER_EXTRAS)
    return {**obj, **PROVIDER_EXTRAS}


CONTEXT_ERROR = {"error": {
    "message": "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.",
    "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}
"""OpenAI's answer (HTTP 400) to a prompt longer than the model's context window."""

VLLM_CONTEXT_ERROR = {"object": "error", "type": "BadRequestError", "param": None, "code": 400, "message": (
    "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4900 in the messages, "
    "100 in the completion). Please reduce the length of the messages or completion.")}
"""vLLM's answer (HTTP 400) to the same: no ``param``, an integer ``code``."""


def _error(status: int, message: str) -> Response:
    kind = {429: "rate_limit_error", 400: "invalid_request_error"}.get(status, "server_error")
    body = {"error": {"message": message, "type": kind, "param": None, "code": str(status)}}
    headers = {"retry-after": "3"} if status == 429 else None
    return Response(orjson.dumps(body), status_code=status, media_type="application/json", headers=headers)


def _full_response(endpoint: str, model: str, body: dict) -> dict:
    text, call = answer_text(model, endpoint, body), _tool_call(body)
    use = _usage(_prompt_words(endpoint, body), 0 if call else len(text.split()), model)
    base = {"created": int(time.time()), "model": model, "usage": use}
    if endpoint == "completions":
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "stop"}
        return _extras(model, {"id": "cmpl-fake", "object": "text_completion", "choices": [choice], **base}, "")
    message: dict = {"role": "assistant", "content": None if call else text}
    if call:
        message["tool_calls"] = [call]
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": "tool_calls" if call else "stop"}
    return _extras(model, {"id": "chatcmpl-fake", "object": "chat.completion", "choices": [choice], **base}, "message")


def _chunks(endpoint: str, model: str, body: dict) -> list[dict]:
    text, call = answer_text(model, endpoint, body), _tool_call(body)
    words = [w + " " for w in text.split()]
    words[-1] = words[-1].rstrip()
    base = {"id": "chatcmpl-fake" if endpoint == "chat" else "cmpl-fake", "created": int(time.time()), "model": model}
    if endpoint == "completions":
        obj = {**base, "object": "text_completion"}
        out = [{**obj, "choices": [{"index": 0, "text": w, "logprobs": None, "finish_reason": None}]} for w in words]
        out.append({**obj, "choices": [{"index": 0, "text": "", "logprobs": None, "finish_reason": "stop"}]})
    else:
        obj = {**base, "object": "chat.completion.chunk"}

        def delta(d: dict, finish: str | None = None) -> dict:
            return {**obj, "choices": [{"index": 0, "delta": d, "logprobs": None, "finish_reason": finish}]}

        out = [delta({"role": "assistant", "content": ""})]
        if call:
            out.append(delta({"tool_calls": [{"index": 0, **call}]}))
        else:
            out.extend(delta({"content": w}) for w in words)
        out.append(delta({}, "tool_calls" if call else "stop"))
    if (body.get("stream_options") or {}).get("include_usage"):
        completion = 0 if call else len(words)
        out.append({**obj, "choices": [], "usage": _usage(_prompt_words(endpoint, body), completion, model)})
    return [_extras(model, chunk, "delta") for chunk in out]


def fake_embedding(item: str | list[int], dimensions: int = 4) -> list[float]:
    """The vector the fake upstream answers for one embedding input: its length (characters,
    or token ids), then 0.5, -0.25, 0.125 ... up to ``dimensions`` numbers."""
    return [float(len(item))] + [0.5 * (-0.5) ** i for i in range(dimensions - 1)]


def embedding_answer(model: str, body: dict) -> dict:
    """OpenAI's embeddings answer for ``body``: one :func:`fake_embedding` per input;
    ``usage.prompt_tokens`` = words of the text inputs plus the token ids."""
    value = body.get("input")
    items = [value] if isinstance(value, str) or (value and isinstance(value[0], int)) else list(value or [])
    dims = body.get("dimensions") or 4
    tokens = sum(len(i) if isinstance(i, list) else len(i.split()) for i in items)
    data = [{"object": "embedding", "index": i, "embedding": fake_embedding(item, dims)} for i, item in enumerate(items)]
    return {"object": "list", "data": data, "model": model, "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}


class _Cut(Exception):
    """Raised inside a response body to make the server drop the connection."""


def create_app(state: UpstreamState) -> Starlette:
    """The fake upstream ASGI app, recording into ``state``."""

    async def handle(request: Request) -> Response:
        endpoint = "chat" if request.url.path.endswith("/chat/completions") else "completions"
        body = orjson.loads(await request.body())
        state.requests.append({"path": request.url.path, "replica": request.path_params.get("replica", ""),
                               "headers": dict(request.headers), "body": body})
        model = str(body.get("model", ""))
        if model.endswith("-error-vllm-context"):
            return Response(orjson.dumps(VLLM_CONTEXT_ERROR), status_code=400, media_type="application/json")
        if model.endswith("-error-context"):
            return Response(orjson.dumps(CONTEXT_ERROR), status_code=400, media_type="application/json")
        for status in (429, 500, 400):
            if model.endswith(f"-error-{status}"):
                return _error(status, f"fake upstream error {status} for {model}")
        if model.endswith("-html"):  # a proxy's error page with status 200, whatever was asked
            return Response("<html><body>Service temporarily unavailable</body></html>", media_type="text/html")
        slow = model.endswith("-slow")
        if request.url.path.endswith("/embeddings"):
            return Response(orjson.dumps(embedding_answer(model, body)), media_type="application/json")
        if body.get("stream"):
            return StreamingResponse(_sse(endpoint, model, body, slow), media_type="text/event-stream")
        if slow:
            await asyncio.sleep(SLOW_FIRST_TOKEN_S)
        payload = orjson.dumps(_full_response(endpoint, model, body))
        if model.endswith("-drop-mid-stream"):
            return StreamingResponse(_cut_body(payload), media_type="application/json",
                                     headers={"content-length": str(len(payload))})
        return Response(payload, media_type="application/json")

    async def _cut_body(payload: bytes):
        yield payload[: len(payload) // 2]
        raise _Cut("fake upstream cut the connection")

    async def _sse(endpoint: str, model: str, body: dict, slow: bool):
        record = StreamRecord(model=model)
        state.streams.append(record)
        drop = model.endswith("-drop-mid-stream")
        try:
            if slow:
                await asyncio.sleep(SLOW_FIRST_TOKEN_S)
            for i, chunk in enumerate(_chunks(endpoint, model, body)):
                if drop and i == DROP_AFTER_CHUNKS:
                    raise _Cut("fake upstream dropped the stream")
                if slow and i:
                    await asyncio.sleep(SLOW_TOKEN_S)
                yield b"data: " + orjson.dumps(chunk) + b"\n\n"
                record.sent_chunks += 1
            yield b"data: [DONE]\n\n"
            record.finished = True
        finally:
            if not record.finished:
                record.closed_early = True
            record.closed.set()

    paths = [f"{prefix}/v1/{name}" for prefix in ("", "/{replica}") for name in ("chat/completions", "completions",
                                                                                  "embeddings")]
    return Starlette(routes=[Route(p, handle, methods=["POST"]) for p in paths])


@dataclass
class RunningServer:
    """A uvicorn server running in a daemon thread.

    Attributes:
        url: ``http://127.0.0.1:PORT`` (no trailing slash, no ``/v1``).
        state: what the app recorded.
    """

    url: str
    state: UpstreamState
    server: uvicorn.Server
    thread: threading.Thread

    def v1(self, replica: str = "") -> str:
        """Base URL ending in ``/v1``, optionally under a replica prefix."""
        return f"{self.url}/{replica}/v1" if replica else f"{self.url}/v1"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=5)


def serve_in_thread(state: UpstreamState | None = None, app=None) -> RunningServer:
    """Serve the fake upstream (or ``app``) on 127.0.0.1 on a free port in a background thread.

    Returns:
        The running server; call :meth:`RunningServer.stop` when done.

    Raises:
        RuntimeError: the server did not start within 10 s.
    """
    state = state or UpstreamState()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app or create_app(state), lifespan="off", log_level="critical",
                            access_log=False, timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True, name="fake-upstream")
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("fake upstream did not start")
        time.sleep(0.01)
    return RunningServer(url=f"http://127.0.0.1:{port}", state=state, server=server, thread=thread)
