"""The one shape every backend has.

A backend receives an OpenAI request body (a ``dict`` already validated by the gateway,
with ``model`` replaced by the backend's own model id) and answers with OpenAI response
objects as ``dict``: a ``chat.completion`` / ``text_completion`` for :meth:`Backend.send`,
or an async iterator of ``chat.completion.chunk`` / ``text_completion`` chunk dicts for
:meth:`Backend.stream`; an embedding backend (policy ``task: embedding``) answers
:meth:`Backend.embed` with OpenAI's embeddings ``list``. Every failure is raised as a :class:`backends.errors.BackendError`
subclass (translated at the edge, never a raw httpx/litellm exception).

Usage is reported in the usual OpenAI ``usage`` object (``prompt_tokens``,
``completion_tokens``, ``prompt_tokens_details.cached_tokens``). A backend that knows the
real cost of a call (the replay backend's recorded cost; the hosted backend's cost of a
prompt-cache write, which the OpenAI usage cannot express) may add the non-standard key
``"x_mixroute_cost_usd"`` (USD) to the response or the final chunk; the gateway records it as
the call's cost and strips it. Likewise a backend whose provider reports prompt-cache writes
(the hosted backend, for Anthropic) may add ``"x_mixroute_cache_write"``:
``{"tokens": <int>, "tokens_1h": <int>}``, the prompt tokens written to the provider's cache
and the part of them written to its 1-hour cache (tokens), which the gateway records in the
outcome (``tokens_cache_write``, ``tokens_cache_write_1h``) and strips.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from typing import Literal

from backends.config import BackendConfig
from backends.credentials import Redactor
from backends.errors import BackendError
from backends.inflight import InFlight

Endpoint = Literal["chat", "completions"]

COST_KEY = "x_mixroute_cost_usd"
CACHE_WRITE_KEY = "x_mixroute_cache_write"
CACHE_SCOPE_KEY = "x_mixroute_cache"
"""Private request-body key the engine adds for backends: ``{"tenant", "prefix_hash"}``.
Backends that send the body upstream remove it (vllm, hosted); the hosted backend uses it
for ``prompt_cache_key``."""


class Backend(ABC):
    """Base class of all backends.

    Args:
        config: the backend's resolved policy entry.
    """

    def __init__(self, config: BackendConfig):
        self.config = config
        self.name = config.name
        #: Masks this backend's credentials in upstream text that becomes an error message.
        self.redact = Redactor.for_config(config)
        #: Calls in flight (the dispatcher counts them): a replaced backend is closed after the last.
        self.in_flight = InFlight()

    @property
    def model(self) -> str:
        """The model id this backend asks its upstream for."""
        return self.config.model

    @abstractmethod
    async def send(self, endpoint: Endpoint, body: dict) -> dict:
        """Send a non-streaming request.

        Args:
            endpoint: ``"chat"`` (``/v1/chat/completions``) or ``"completions"``.
            body: the OpenAI request body; ``body["model"]`` is already this backend's model.

        Returns:
            The OpenAI response object as a dict, including ``usage``.

        Raises:
            backends.errors.BackendError: any upstream failure.
        """

    @abstractmethod
    def stream(self, endpoint: Endpoint, body: dict) -> AsyncIterator[dict]:
        """Send a streaming request; yield OpenAI chunk dicts.

        The body always has ``stream_options.include_usage = true`` so the last chunk
        carries ``usage``. Errors before the first chunk raise a retryable
        :class:`BackendError`; errors after it raise :class:`BackendStreamError`.
        Closing the iterator (client disconnect) must cancel the upstream request.
        """

    async def embed(self, body: dict) -> dict:
        """Embed the inputs of an OpenAI embeddings request (``POST /v1/embeddings``).

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
