"""What every door provides to the shared pipeline (:mod:`gateway.api.completions`).

A :class:`Door` turns the client's body into a :class:`DoorCall` (the canonical request the
router decides on and the backends render from), renders the canonical answer back, and
renders errors in its dialect's envelope. A :class:`StreamEncoder` is the per-stream state
that turns canonical ``chat.completion.chunk`` dicts into the dialect's SSE bytes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from backends.errors import BackendError

Endpoint = Literal["chat", "completions"]


@dataclass
class DoorCall:
    """One request as the pipeline sees it.

    Attributes:
        endpoint: the backend endpoint the canonical body is for (``chat`` or ``completions``).
        body: the canonical request: an OpenAI Chat Completions (or legacy Completions) body,
            not yet validated (the pipeline validates it with :mod:`gateway.schemas`).
        stream: the client asked for a stream (in its own dialect's terms).
        extra: door-private values the door's rendering needs later (the Responses door's
            stored conversation, the Messages door's requested model name...). Never sent
            to a backend.
        session_hint: a session id the dialect names explicitly, prefixed with the field it
            came from (the Messages door: ``f"metadata.user_id:{user_id}"``); the
            ``x-mixroute-session`` header still wins (:func:`gateway.sessions.session_hint`).
        session_follows: the id of an earlier answer this request continues (the Responses
            door's ``previous_response_id``): the session of that answer goes on.
        session_answer_id: the id under which a later request may continue this answer (the
            Responses door's new response id).
    """

    endpoint: Endpoint
    body: dict
    stream: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    session_hint: str | None = None
    session_follows: str | None = None
    session_answer_id: str | None = None


@dataclass
class DoorContext:
    """What a door may read while parsing and after answering: the HTTP request, the live
    runtime (policy, router, backends), the process settings, the caller and the store."""

    request: Any
    runtime: Any
    settings: Any
    principal: Any
    store: Any


@dataclass
class Rendered:
    """What the pipeline knows of a finished non-streamed call when the door renders it."""

    request_id: str
    backend: str
    model: str
    cost_usd: float


class StreamEncoder(ABC):
    """Per-stream state turning canonical chunks into the dialect's SSE bytes.

    The pipeline calls :meth:`chunk` for every chunk that carries ``choices``, :meth:`usage`
    once for the final usage chunk (``usage`` with ``cost_usd`` added), then either
    :meth:`done` or :meth:`error`. Each returns the bytes to send (may be ``b""``).
    """

    @abstractmethod
    def chunk(self, chunk: dict) -> bytes: ...

    @abstractmethod
    def usage(self, chunk: dict, usage: dict) -> bytes: ...

    @abstractmethod
    def done(self) -> bytes: ...

    @abstractmethod
    def error(self, exc: BackendError) -> bytes: ...


class Door(ABC):
    """A client dialect.

    Attributes:
        name: the dialect (``chat``, ``completions``, ``responses``, ``messages``), recorded
            in the decision's signals as ``door``.
    """

    name: str

    @abstractmethod
    async def parse(self, raw: dict, ctx: DoorContext) -> DoorCall:
        """The canonical request for the client's body ``raw``.

        Args:
            raw: the JSON object the client sent.
            ctx: the request's :class:`DoorContext`.

        Raises:
            router.errors.InvalidRequest: the body breaks the dialect's rules.
        """

    @abstractmethod
    def render(self, response: dict, call: DoorCall, done: Rendered) -> dict:
        """The dialect's answer for a canonical ``chat.completion`` (or ``text_completion``)."""

    @abstractmethod
    def encoder(self, call: DoorCall, request_id: str, backend: str, model: str) -> StreamEncoder:
        """A fresh :class:`StreamEncoder` for one stream."""

    def error_body(self, status: int, message: str, type_: str, code: str | None, param: str | None) -> dict:
        """The dialect's error envelope: OpenAI's ``{"error": {...}}`` unless overridden."""
        return {"error": {"message": message, "type": type_, "param": param, "code": code}}

    async def after(self, call: DoorCall, rendered: dict, ctx: DoorContext) -> None:
        """Hook run with the rendered answer once it is complete, streamed or not, before the
        outcome is recorded (the Responses door stores it for ``previous_response_id``)."""


def sse(data: dict, event: str | None = None) -> bytes:
    """One server-sent event; ``event`` names it (Anthropic's and the Responses API's events
    carry an ``event:`` line; Chat Completions' do not)."""
    head = b"event: " + event.encode() + b"\n" if event else b""
    return head + b"data: " + orjson.dumps(data) + b"\n\n"
