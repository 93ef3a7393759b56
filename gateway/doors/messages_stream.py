"""Canonical ``chat.completion.chunk`` stream -> Anthropic's Messages server-sent events.

The event sequence, as Anthropic sends it (https://docs.anthropic.com/en/docs/build-with-claude/streaming)::

    message_start, ping
    per content block: content_block_start, content_block_delta... (text_delta,
                       input_json_delta or thinking_delta), content_block_stop
    message_delta (stop_reason and usage), message_stop
    or, on a backend error after the start: error

Each event goes out with an ``event:`` line naming its ``type``. litellm's
``AnthropicStreamWrapper`` wraps its own ``CustomStreamWrapper`` of ``ModelResponseStream``
objects and cannot be fed the gateway's chunk dicts one at a time, hence this encoder.
"""

from __future__ import annotations

import uuid

from backends.call import CallReport
from backends.errors import BackendError
from backends.response import Delta, ToolCallDelta, Usage
from gateway.doors.base import StreamEncoder, sse

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "function_call": "tool_use",
                "content_filter": "refusal"}
"""Chat ``finish_reason`` -> Messages ``stop_reason`` (litellm's adapter maps them alike)."""

ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 402: "billing_error",
               403: "permission_error", 404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
               503: "overloaded_error", 504: "timeout_error", 529: "overloaded_error"}
"""Anthropic's error ``type`` per HTTP status (https://docs.anthropic.com/en/api/errors); other
4xx are ``invalid_request_error``, other 5xx ``api_error``."""


def error_type(status: int) -> str:
    return ERROR_TYPES.get(status) or ("invalid_request_error" if status < 500 else "api_error")


def error_envelope(status: int, message: str) -> dict:
    """Anthropic's error body: ``{"type": "error", "error": {"type", "message"}}``."""
    return {"type": "error", "error": {"type": error_type(status), "message": message}}


def anthropic_usage(used: Usage) -> dict:
    """Messages ``usage``: Anthropic counts ``input_tokens`` without the cache reads and writes,
    which it reports apart. The gateway's ``cost_usd`` is kept where the usage has it (a
    stream's final usage, as chat streams report it)."""
    out = {"input_tokens": used.uncached_tokens, "output_tokens": used.output_tokens,
           "cache_read_input_tokens": used.cached_tokens, "cache_creation_input_tokens": used.cache_write_tokens}
    if used.cost_usd is not None:
        out["cost_usd"] = used.cost_usd
    return out


def stop_sequence(finish_reason: str | None, stop_reason: object, stops: list) -> str | None:
    """The client's stop sequence that ended the answer, when the backend says which: vLLM
    puts the matched string in the choice's ``stop_reason`` (OpenAI's API and litellm say
    only ``finish_reason: "stop"``, and the answer is then ``end_turn``)."""
    return stop_reason if finish_reason == "stop" and isinstance(stop_reason, str) and stop_reason in stops else None


def new_message_id() -> str:
    return "msg_" + uuid.uuid4().hex[:24]


class MessagesEncoder(StreamEncoder):
    """One stream's state: the open content block and where each chat tool call went.

    Args:
        message_id: ``msg_...`` of the message being streamed.
        model: the model that answers (the backend's; a chunk's own ``model`` wins).
    """

    def __init__(self, message_id: str, model: str, stops: list | None = None, report: CallReport | None = None,
                 tool_names: dict[str, str] | None = None):
        self.message_id, self.model, self.stops, self.report = message_id, model, stops or [], report
        self.tool_names = tool_names or {}
        self.stop_sequence: str | None = None
        self.started = False
        self.index = -1
        self.open: str | None = None
        self.tools: dict[int, int] = {}
        self.stop_reason: str | None = None
        self.used: dict | None = None

    def chunk(self, chunk: dict) -> bytes:
        out = [] if self.started else [self._start(chunk.get("model"))]
        if chunk.get("usage"):
            self.used = chunk["usage"]
        delta = Delta.from_chunk(chunk)  # the first choice: the Messages API has one answer per request
        if delta.reasoning:
            out.append(self._delta("thinking", {"type": "thinking_delta", "thinking": delta.reasoning}))
        if delta.text:
            out.append(self._delta("text", {"type": "text_delta", "text": delta.text}))
        for call in delta.tool_calls:
            out.append(self._tool(call))
        if delta.finish_reason:
            self.stop_sequence = stop_sequence(delta.finish_reason, delta.stop_reason, self.stops)
            self.stop_reason = "stop_sequence" if self.stop_sequence else STOP_REASONS.get(
                delta.finish_reason, "end_turn")
        return b"".join(out)

    def usage(self, chunk: dict, usage: dict) -> bytes:
        self.used = usage
        return b""

    def done(self) -> bytes:
        out = [] if self.started else [self._start(None)]
        out.append(self._close())
        out.append(sse({"type": "message_delta", "delta": {"stop_reason": self.stop_reason or "end_turn",
                                                           "stop_sequence": self.stop_sequence},
                        "usage": anthropic_usage(Usage.from_chat(self.used, self.report))}, "message_delta"))
        out.append(sse({"type": "message_stop"}, "message_stop"))
        return b"".join(out)

    def error(self, exc: BackendError) -> bytes:
        return sse(error_envelope(exc.status, exc.message), "error")

    def _start(self, model: str | None) -> bytes:
        self.started = True
        message = {"id": self.message_id, "type": "message", "role": "assistant", "model": model or self.model,
                   "content": [], "stop_reason": None, "stop_sequence": None,
                   "usage": {"input_tokens": 0, "output_tokens": 0}}
        return sse({"type": "message_start", "message": message}, "message_start") + sse({"type": "ping"}, "ping")

    def _open_block(self, kind: str, block: dict) -> bytes:
        out = self._close()
        self.index += 1
        self.open = kind
        return out + sse({"type": "content_block_start", "index": self.index, "content_block": block},
                         "content_block_start")

    def _close(self) -> bytes:
        if self.open is None:
            return b""
        self.open = None
        return sse({"type": "content_block_stop", "index": self.index}, "content_block_stop")

    def _delta(self, kind: str, delta: dict) -> bytes:
        out = b""
        if self.open != kind:
            start = {"type": "text", "text": ""} if kind == "text" else {
                "type": "thinking", "thinking": "", "signature": ""}
            out = self._open_block(kind, start)
        return out + sse({"type": "content_block_delta", "index": self.index, "delta": delta}, "content_block_delta")

    def _tool(self, call: ToolCallDelta) -> bytes:
        out = b""
        if call.index not in self.tools:
            name = call.name or ""
            out = self._open_block("tool_use", {"type": "tool_use", "id": call.id or "toolu_" + uuid.uuid4().hex[:24],
                                                "name": self.tool_names.get(name, name), "input": {}})
            self.tools[call.index] = self.index
        if call.arguments and self.tools[call.index] == self.index and self.open == "tool_use":
            # A later delta of a call whose block was closed by another block cannot be sent
            # (Anthropic's blocks do not interleave); backends stream calls one after another.
            out += sse({"type": "content_block_delta", "index": self.index,
                        "delta": {"type": "input_json_delta", "partial_json": call.arguments}}, "content_block_delta")
        return out
