"""A fake Anthropic Messages API (``POST /v1/messages``) with prompt caching, over real HTTP.

Tests fake remote providers only at the HTTP edge: a ``hosted`` backend whose model is
``anthropic/...`` and whose ``api_base`` is this server's URL (litellm appends
``/v1/messages``) runs litellm's own Anthropic translation unchanged, request and response.

Caching follows Anthropic's prompt caching guide, simplified: the cached prefix is the
``system`` blocks up to and including the last one with ``cache_control``. The first request
with a prefix *writes* it (``usage.cache_creation_input_tokens``), later ones *read* it
(``usage.cache_read_input_tokens``); ``usage.input_tokens`` counts only the rest of the
prompt, as Anthropic's does (the three are disjoint). A write is split by lifetime in
``usage.cache_creation`` (``ephemeral_5m_input_tokens``, ``ephemeral_1h_input_tokens``), as
Anthropic reports it: the prefix up to the last breakpoint whose ``cache_control`` has
``"ttl": "1h"`` is written to the 1-hour cache, the rest to the 5-minute one (Anthropic
requires 1-hour breakpoints to come before 5-minute ones). Token counts are characters / 4
(:func:`tokens`), at least 1; ``output_tokens`` is the number of words answered.

Streams send Anthropic's events: ``message_start`` (with the input usage),
``content_block_start``, one ``content_block_delta`` per word, ``content_block_stop``,
``message_delta`` (with ``output_tokens``) and ``message_stop``.

Serve it with ``tests.backends.fake_upstream.serve_in_thread(state, app=create_app(state))``.
"""

from __future__ import annotations

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from tests.backends.fake_upstream import UpstreamState


def tokens(text: str) -> int:
    """The fake's token count of ``text``: characters / 4, at least 1."""
    return max(1, len(text) // 4)


def _texts(content) -> list[str]:
    if isinstance(content, str):
        return [content]
    return [str(block.get("text") or "") for block in content or () if isinstance(block, dict)]


def split_usage(body: dict, cached: set[str]) -> dict:
    """Anthropic's input usage for a Messages request: ``{"input_tokens",
    "cache_creation_input_tokens", "cache_read_input_tokens", "cache_creation"}`` (the last
    splitting the writes by lifetime, see the module docstring); a written prefix is added to
    ``cached``."""
    system = body.get("system") or []
    system = [{"type": "text", "text": system}] if isinstance(system, str) else list(system)
    marks = [i for i, block in enumerate(system) if isinstance(block, dict) and block.get("cache_control")]
    prefix_blocks = system[: marks[-1] + 1] if marks else []
    prefix = "".join(_texts(prefix_blocks))
    rest = "".join(_texts(system[len(prefix_blocks):]))
    rest += "".join(t for m in body.get("messages") or () for t in _texts(m.get("content")))
    written = written_1h = read = 0
    if prefix and prefix in cached:
        read = tokens(prefix)
    elif prefix:
        written = tokens(prefix)
        cached.add(prefix)
        hour_marks = [i for i in marks if (system[i]["cache_control"] or {}).get("ttl") == "1h"]
        if hour_marks:
            written_1h = min(written, tokens("".join(_texts(system[: hour_marks[-1] + 1]))))
    return {"input_tokens": tokens(rest), "cache_creation_input_tokens": written, "cache_read_input_tokens": read,
            "cache_creation": {"ephemeral_5m_input_tokens": written - written_1h,
                               "ephemeral_1h_input_tokens": written_1h}}


def answer_words(body: dict) -> list[str]:
    """The answer, as words: ``Hello from <model>.``."""
    return ["Hello", "from", f"{body.get('model')}."]


def _message(body: dict, usage: dict) -> dict:
    text = " ".join(answer_words(body))
    return {"id": "msg_fake", "type": "message", "role": "assistant", "model": body.get("model"),
            "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {**usage, "output_tokens": len(answer_words(body))}}


def _event(kind: str, data: dict) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps({"type": kind, **data}) + b"\n\n"


async def _events(body: dict, usage: dict):
    words = answer_words(body)
    start = {**_message(body, usage), "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    yield _event("message_start", {"message": start})
    yield _event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})
    for i, word in enumerate(words):
        yield _event("content_block_delta", {"index": 0, "delta": {"type": "text_delta",
                                                                   "text": word if i == 0 else " " + word}})
    yield _event("content_block_stop", {"index": 0})
    yield _event("message_delta", {"delta": {"stop_reason": "end_turn", "stop_sequence": None},
                                   "usage": {"output_tokens": len(words)}})
    yield _event("message_stop", {})


def create_app(state: UpstreamState) -> Starlette:
    """The fake Anthropic ASGI app, recording each request into ``state`` and keeping its
    prompt cache (prefixes written) for the app's lifetime."""
    cached: set[str] = set()

    async def messages(request: Request) -> Response:
        body = orjson.loads(await request.body())
        state.requests.append({"path": request.url.path, "replica": "", "headers": dict(request.headers),
                               "body": body})
        usage = split_usage(body, cached)
        if body.get("stream"):
            return StreamingResponse(_events(body, usage), media_type="text/event-stream")
        return Response(orjson.dumps(_message(body, usage)), media_type="application/json")

    return Starlette(routes=[Route("/v1/messages", messages, methods=["POST"])])
