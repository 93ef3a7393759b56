"""One conformance suite, run against every backend kind in ``conftest.KINDS``.

Remote providers are faked only at the HTTP edge (the fake upstream served over a real
socket); the fake backend answers in process.
"""

from __future__ import annotations

import asyncio

import pytest

from backends.call import CallContext, CallReport
from backends.errors import (
    BackendError,
    BackendRateLimited,
    BackendRejected,
    BackendServerError,
    BackendStreamError,
)

CHAT = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "say hello please"}]}
COMPLETION = {"prompt": "Once upon a time"}
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def _body(backend, base: dict, **extra) -> dict:
    return {"model": backend.model, **base, **extra}


async def _collect(agen) -> list[dict]:
    return [chunk async for chunk in agen]


def _chat_text(chunks: list[dict]) -> str:
    return "".join((c["delta"].get("content") or "") for ch in chunks for c in ch.get("choices") or [])


def _completion_text(chunks: list[dict]) -> str:
    return "".join((c.get("text") or "") for ch in chunks for c in ch.get("choices") or [])


def _assert_usage(usage: dict | None) -> None:
    assert usage is not None
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


async def test_chat_send_shape_and_usage(make_backend):
    backend = await make_backend("")
    out = await backend.send("chat", _body(backend, CHAT))
    assert out["object"] == "chat.completion"
    assert isinstance(out["id"], str) and isinstance(out["created"], int)
    choice = out["choices"][0]
    assert choice["message"]["role"] == "assistant"
    assert isinstance(choice["message"]["content"], str) and choice["message"]["content"]
    assert choice["finish_reason"] == "stop"
    _assert_usage(out["usage"])


async def test_completions_send_shape(make_backend):
    backend = await make_backend("")
    out = await backend.send("completions", _body(backend, COMPLETION))
    assert out["object"] == "text_completion"
    assert isinstance(out["choices"][0]["text"], str) and out["choices"][0]["text"]
    _assert_usage(out["usage"])


async def test_chat_stream_matches_send_and_ends_with_usage(make_backend):
    backend = await make_backend("")
    full = await backend.send("chat", _body(backend, CHAT))
    chunks = await _collect(backend.stream("chat", _body(backend, CHAT)))
    assert len(chunks) >= 3
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert _chat_text(chunks) == full["choices"][0]["message"]["content"]
    _assert_usage(chunks[-1].get("usage"))
    finishes = [c["finish_reason"] for ch in chunks for c in ch["choices"] if c.get("finish_reason")]
    assert finishes == ["stop"]


async def test_completions_stream_matches_send(make_backend):
    backend = await make_backend("")
    full = await backend.send("completions", _body(backend, COMPLETION))
    chunks = await _collect(backend.stream("completions", _body(backend, COMPLETION)))
    assert all(c["object"] == "text_completion" for c in chunks)
    assert _completion_text(chunks) == full["choices"][0]["text"]
    _assert_usage(chunks[-1].get("usage"))


async def test_tools_pass_through_to_tool_calls(make_backend, kind):
    if not kind.tools:
        pytest.skip(f"{kind.name} answers only with recorded text, never tool calls")
    backend = await make_backend("")
    out = await backend.send("chat", _body(backend, CHAT, tools=TOOLS))
    choice = out["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    call = choice["message"]["tool_calls"][0]
    assert call["type"] == "function" and call["function"]["name"] == "get_weather"
    assert "city" in call["function"]["arguments"]

    chunks = await _collect(backend.stream("chat", _body(backend, CHAT, tools=TOOLS)))
    names = [t["function"].get("name") for ch in chunks for c in ch["choices"]
             for t in c["delta"].get("tool_calls") or []]
    assert "get_weather" in names


@pytest.mark.parametrize(("suffix", "error", "retryable"), [
    ("-error-429", BackendRateLimited, True),
    ("-error-500", BackendServerError, True),
    ("-error-400", BackendRejected, False),
])
async def test_upstream_status_errors(make_backend, suffix, error, retryable):
    backend = await make_backend(suffix)
    with pytest.raises(error) as info:
        await backend.send("chat", _body(backend, CHAT))
    assert info.value.retryable is retryable
    assert info.value.backend == backend.name
    assert "sk-test" not in info.value.message
    if suffix == "-error-429" and backend.config.kind in ("vllm", "hosted"):
        # The upstream's Retry-After reaches the client (a fresh-user pass: hosted lost it).
        assert getattr(info.value, "headers", None) == {"retry-after": "3"}, getattr(info.value, "headers", None)

    chunks = []
    with pytest.raises(error):
        async for chunk in backend.stream("chat", _body(backend, CHAT)):
            chunks.append(chunk)
    assert chunks == []


async def test_upstream_context_length_exceeded_keeps_param_and_code(make_backend):
    """The client's envelope keeps OpenAI's param and code (it had code upstream_rejected
    and param null), as the gateway's own context check gives them."""
    backend = await make_backend("-error-context")
    expected = {"type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}
    with pytest.raises(BackendRejected) as info:
        await backend.send("chat", _body(backend, CHAT))
    # retryable: another candidate, with a larger context window, can answer it
    assert info.value.retryable and info.value.status == 400
    assert {k: info.value.to_envelope()["error"][k] for k in expected} == expected
    with pytest.raises(BackendRejected) as info:
        await _collect(backend.stream("chat", _body(backend, CHAT)))
    assert {k: info.value.to_envelope()["error"][k] for k in expected} == expected


async def test_drop_mid_stream_raises_stream_error_after_first_chunk(make_backend):
    backend = await make_backend("-drop-mid-stream")
    chunks = []
    with pytest.raises(BackendStreamError) as info:
        async for chunk in backend.stream("chat", _body(backend, CHAT)):
            chunks.append(chunk)
    assert len(chunks) >= 1
    assert info.value.backend == backend.name


async def test_drop_mid_response_is_retryable_error(make_backend):
    backend = await make_backend("-drop-mid-stream")
    with pytest.raises(BackendError) as info:
        await backend.send("chat", _body(backend, CHAT))
    assert info.value.retryable and not isinstance(info.value, BackendStreamError)


async def test_unknown_body_fields_reach_upstream(make_backend, kind, upstream_state):
    if not kind.reaches_upstream:
        pytest.skip(f"{kind.name} has no upstream")
    backend = await make_backend("")
    extra = {"top_k": 7, "x_custom": {"nested": [1, 2]}, "temperature": 0.25}
    await backend.send("chat", _body(backend, CHAT, **extra))
    seen = upstream_state.last_body
    assert {k: seen.get(k) for k in extra} == extra
    assert seen["messages"] == CHAT["messages"]

    await _collect(backend.stream("completions", _body(backend, COMPLETION, **extra)))
    seen = upstream_state.last_body
    assert {k: seen.get(k) for k in extra} == extra
    assert seen["stream"] is True and seen["stream_options"]["include_usage"] is True


async def test_client_disconnect_closes_upstream_stream(make_backend, kind, upstream_state):
    if not kind.reaches_upstream:
        pytest.skip(f"{kind.name} has no upstream")
    backend = await make_backend("-slow")
    agen = backend.stream("chat", _body(backend, CHAT))
    got = [await agen.__anext__(), await agen.__anext__()]
    assert got
    await agen.aclose()
    record = upstream_state.streams[-1]
    assert await asyncio.to_thread(record.closed.wait, 5), "upstream never saw the disconnect"
    assert record.closed_early and not record.finished


CONTEXT = CallContext(tenant="acme", prefix_hash="0123456789abcdef", session_id="sess-1", request_id="mr-conf")


async def test_the_call_context_travels_beside_the_body(make_backend, kind, upstream_state):
    """Every backend takes the caller's context and fills a report, and neither reaches the
    answer, the chunks or (for backends with an upstream) the body sent upstream."""
    backend = await make_backend("")
    report = CallReport()
    out = await backend.send("chat", _body(backend, CHAT), context=CONTEXT, report=report)
    chunks = await _collect(backend.stream("chat", _body(backend, CHAT), context=CONTEXT, report=CallReport()))
    for obj in (out, *chunks):
        assert not [k for k in obj if k.startswith("x_")], obj
    _assert_usage(out["usage"])
    if kind.reaches_upstream:
        seen = upstream_state.last_body
        sent = str(seen)
        assert "acme" not in sent and "sess-1" not in sent and "mr-conf" not in sent
        assert seen["messages"] == CHAT["messages"]
