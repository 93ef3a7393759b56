"""Canonical ``chat.completion.chunk`` stream -> the Responses API's server-sent events.

The event sequence, as OpenAI sends it (https://platform.openai.com/docs/api-reference/responses-streaming)::

    response.created, response.in_progress
    per reasoning item: response.output_item.added, response.reasoning_text.delta...,
                    response.reasoning_text.done, response.output_item.done
    per text item:  response.output_item.added, response.content_part.added,
                    response.output_text.delta..., response.output_text.done,
                    response.content_part.done, response.output_item.done
    per function call: response.output_item.added, response.function_call_arguments.delta...,
                    response.function_call_arguments.done, response.output_item.done
    response.completed (with usage)   or, on a backend error: error, response.failed

Every event carries ``type`` and ``sequence_number`` and goes out with an ``event:`` line.
litellm's Responses streaming iterator wraps its own ``CustomStreamWrapper`` and cannot be
fed the gateway's chunks one at a time, hence this encoder.
"""

from __future__ import annotations

import time

from backends.call import CallReport
from backends.errors import BackendError
from backends.response import Delta, ToolCallDelta, Usage
from gateway.doors.base import StreamEncoder, sse
from gateway.doors.responses_shapes import (function_call_item, message_item, new_id, reasoning_item, response_object,
                                           usage)


class _Item:
    """An output item being streamed: reasoning, a message or a function call; ``parts`` are
    its text (or arguments) as streamed."""

    def __init__(self, index: int, item_id: str, kind: str, call_id: str = "", name: str = ""):
        self.index, self.id, self.kind, self.call_id, self.name = index, item_id, kind, call_id, name
        self.parts: list[str] = []
        self.open = True

    def shape(self, status: str) -> dict:
        if self.kind == "message":
            return message_item(self.id, "".join(self.parts), status)
        if self.kind == "reasoning":
            return reasoning_item(self.id, "".join(self.parts), status)
        return function_call_item(self.id, self.call_id, self.name, "".join(self.parts), status)


class ResponsesEncoder(StreamEncoder):
    """One stream's state.

    Args:
        response_id: ``resp_...`` of the response being streamed.
        echo: the request fields the response object repeats.
        model: the model that answers (the backend's; a chunk's own ``model`` wins).
        report: what the backend reports beside its answer (its prompt-cache writes), filled
            by the time the usage chunk comes.
    """

    def __init__(self, response_id: str, echo: dict, model: str, report: CallReport | None = None):
        self.response_id, self.echo, self.model, self.report = response_id, echo, model, report
        self.seq = 0
        self.items: list[_Item] = []
        self.text: _Item | None = None
        self.reasoning: _Item | None = None
        self.calls: dict[int, _Item] = {}  # chat tool call index -> item
        self.finish_reason: str | None = None
        self.used: dict | None = None
        self.started = False
        self.created_at = int(time.time())
        self._held = b""

    def _event(self, kind: str, **data) -> bytes:
        out = sse({"type": kind, "sequence_number": self.seq, **data}, event=kind)
        self.seq += 1
        return out

    def _response(self, status: str, **kw) -> dict:
        open_as = "incomplete" if status == "failed" else status  # items have no 'failed' status
        items = [i.shape(open_as if i.open else "completed") for i in self.items]
        return response_object(self.response_id, self.echo, self.model, items, status=status,
                               created_at=self.created_at, **kw)

    def _start(self) -> bytes:
        if self.started:
            return b""
        self.started = True
        snapshot = self._response("in_progress")
        return (self._event("response.created", response=snapshot)
                + self._event("response.in_progress", response=snapshot))

    def _open(self, kind: str, **kw) -> tuple[_Item, bytes]:
        item = _Item(len(self.items), new_id({"message": "msg", "reasoning": "rs"}.get(kind, "fc")), kind, **kw)
        self.items.append(item)
        out = self._event("response.output_item.added", output_index=item.index, item=item.shape("in_progress"))
        if kind == "message":
            out += self._event("response.content_part.added", item_id=item.id, output_index=item.index,
                               content_index=0, part={"type": "output_text", "text": "", "annotations": []})
        return item, out

    def _close(self, item: _Item) -> bytes:
        if not item.open:
            return b""
        item.open = False
        full = "".join(item.parts)
        where = {"item_id": item.id, "output_index": item.index}
        if item.kind == "reasoning":
            out = self._event("response.reasoning_text.done", **where, content_index=0, text=full)
        elif item.kind == "message":
            out = (self._event("response.output_text.done", **where, content_index=0, text=full, logprobs=[])
                   + self._event("response.content_part.done", **where, content_index=0,
                                 part={"type": "output_text", "text": full, "annotations": []}))
        else:
            out = self._event("response.function_call_arguments.done", **where, arguments=full, name=item.name)
        return out + self._event("response.output_item.done", output_index=item.index, item=item.shape("completed"))

    def chunk(self, chunk: dict) -> bytes:
        out = self._start()
        delta = Delta.from_chunk(chunk)  # the first choice: the Responses API has one answer per request
        self.model = delta.model or self.model
        if delta.reasoning and self.text is None and not self.calls:  # reasoning comes before the answer
            if self.reasoning is None:
                self.reasoning, opened = self._open("reasoning")
                out += opened
            self.reasoning.parts.append(delta.reasoning)
            out += self._event("response.reasoning_text.delta", item_id=self.reasoning.id,
                               output_index=self.reasoning.index, content_index=0, delta=delta.reasoning)
        if delta.text:
            if self.text is None:
                if self.reasoning is not None:
                    out += self._close(self.reasoning)
                self.text, opened = self._open("message")
                out += opened
            self.text.parts.append(delta.text)
            out += self._event("response.output_text.delta", item_id=self.text.id, output_index=self.text.index,
                               content_index=0, delta=delta.text, logprobs=[])
        for call in delta.tool_calls:
            out += self._tool_delta(call)
        if delta.finish_reason:
            self.finish_reason = delta.finish_reason
        return out

    def _tool_delta(self, call: ToolCallDelta) -> bytes:
        out = b""
        item = self.calls.get(call.index)
        if item is None:
            for other in [self.reasoning, self.text, *self.calls.values()]:  # one item after another
                if other is not None:
                    out += self._close(other)
            item, opened = self._open("function_call", call_id=call.id or new_id("call"), name=call.name or "")
            self.calls[call.index] = item
            out += opened
        if call.arguments:
            item.parts.append(call.arguments)
            out += self._event("response.function_call_arguments.delta", item_id=item.id, output_index=item.index,
                               delta=call.arguments)
        return out

    def usage(self, chunk: dict, usage_: dict) -> bytes:
        self.used = usage(Usage.from_chat(usage_, self.report))
        return b""

    def _ensure_answer(self) -> None:
        # An answer with no text and no call is one empty message, as when not streamed; its
        # events are held until done() (final may be read first).
        if not any(i.kind != "reasoning" for i in self.items):
            self._held += self._start()
            self._held += self._close(self.reasoning) if self.reasoning is not None else b""
            self.text, opened = self._open("message")
            self._held += opened

    @property
    def final(self) -> dict:
        """The completed response object (what ``response.completed`` carries)."""
        self._ensure_answer()
        return self._response("completed", finish_reason=self.finish_reason, usage_=self.used)

    def done(self) -> bytes:
        self._ensure_answer()
        out, self._held = self._held, b""
        for item in self.items:
            out += self._close(item)
        return out + self._event("response.completed", response=self.final)

    def error(self, exc: BackendError) -> bytes:
        out = self._start()
        # response.error.code takes OpenAI's codes only; the gateway's own is on the error event.
        err = {"code": "rate_limit_exceeded" if exc.status == 429 else "server_error", "message": exc.message}
        return (out + self._event("error", code=exc.code, message=exc.message, param=exc.param)
                + self._event("response.failed", response=self._response("failed", error=err)))
