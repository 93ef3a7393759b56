"""The one shape every backend has.

A backend receives an OpenAI request body (a ``dict`` already validated by the gateway,
with ``model`` replaced by the backend's own model id) and answers with OpenAI response
objects as ``dict``: a ``chat.completion`` / ``text_completion`` for :meth:`Backend.send`,
or an async iterator of ``chat.completion.chunk`` / ``text_completion`` chunk dicts for
:meth:`Backend.stream`; an embedding backend (policy ``task: embedding``) answers
:meth:`Backend.embed` with OpenAI's embeddings ``list``. Every failure is raised as a :class:`backends.errors.BackendError`
subclass (translated at the edge, never a raw httpx/litellm exception).

Usage is reported in the usual OpenAI ``usage`` object (``prompt_tokens``,
``completion_tokens``, ``prompt_tokens_details.cached_tokens``). What the caller knows about
the call (cache scope, session) comes beside the body as a :class:`backends.call.CallContext`;
what the backend knows that the OpenAI answer cannot say (a recorded or cache-write-priced
cost, prompt-cache writes, the replica) goes into the :class:`backends.call.CallReport` the
caller passes, never into the answer.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from typing import Literal

from backends.call import NO_CONTEXT, CallContext, CallReport
from backends.config import BackendConfig
from backends.errors import BackendError

Endpoint = Literal["chat", "completions"]



class Backend(ABC):
    """Base class of all backends.

    Args:
        config: the backend's resolved policy entry.
    """

    def __init__(self, config: BackendConfig):
        self.config = config
        self.name = config.name

    @property
    def model(self) -> str:
        """The model id this backend asks its upstream for."""
        return self.config.model

    @abstractmethod
    async def send(self, endpoint: Endpoint, body: dict, *, context: CallContext = NO_CONTEXT,
                   report: CallReport | None = None) -> dict:
        """Send a non-streaming request.

        Args:
            endpoint: ``"chat"`` (``/v1/chat/completions``) or ``"completions"``.
            body: the OpenAI request body; ``body["model"]`` is already this backend's model.
            context: what the caller knows about the call (cache scope, session).
            report: filled with what the backend knows about the call beyond the answer.

        Returns:
            The OpenAI response object as a dict, including ``usage``.

        Raises:
            backends.errors.BackendError: any upstream failure.
        """

    @abstractmethod
    def stream(self, endpoint: Endpoint, body: dict, *, context: CallContext = NO_CONTEXT,
               report: CallReport | None = None) -> AsyncIterator[dict]:
        """Send a streaming request; yield OpenAI chunk dicts.

        ``context`` and ``report`` as for :meth:`send`; ``report`` is complete when the
        chunk carrying ``usage`` is yielded.

        The body always has ``stream_options.include_usage = true`` so the last chunk
        carries ``usage``. Errors before the first chunk raise a retryable
        :class:`BackendError`; errors after it raise :class:`BackendStreamError`.
        Closing the iterator (client disconnect) must cancel the upstream request.
        """

    async def embed(self, body: dict, *, context: CallContext = NO_CONTEXT, report: CallReport | None = None) -> dict:
        """Embed the inputs of an OpenAI embeddings request (``POST /v1/embeddings``).

        ``context`` and ``report`` as for :meth:`send`.

        Args:
            body: the validated request body: ``input`` (a string, strings, token ids or
                token-id lists), ``dimensions``, ``user``; ``model`` is already this
                backend's model. ``encoding_format`` is never sent: the gateway asks for
                floats and encodes base64 itself.

        Returns:
            OpenAI's ``list`` object: ``data`` (``{"object": "embedding", "index",
            "embedding": [float, ...]}`` per input, in input order), ``model`` and ``usage``
            (``prompt_tokens``, ``total_tokens``).

        Raises:
            backends.errors.BackendError: any upstream failure; this default, for a kind
                that serves no embeddings (policy validation keeps them off embedding routes).
        """
        raise BackendError(f"{self.name}: a {self.config.kind} backend does not serve embeddings", backend=self.name,
                           code="embeddings_unsupported")

    async def start(self) -> None:
        """Open pooled clients. Called once when the policy is loaded."""

    async def aclose(self) -> None:
        """Close pooled clients. Called when the policy is replaced or on shutdown."""
