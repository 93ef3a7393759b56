"""The ``hosted`` backend: any litellm provider (``config.model`` in litellm's
``provider/model`` form, e.g. ``openai/gpt-4o-mini``, ``anthropic/claude-...``).

Calls ``litellm.acompletion`` (chat) or ``litellm.atext_completion`` (completions), or
``litellm.aembedding`` (:mod:`backends.hosted.embeddings`), with
``model=config.model``, ``api_base``, ``api_key`` (the secret's value), ``timeout``
(``httpx.Timeout(timeout_s, connect=connect_timeout_s)``) and ``max_retries=0`` (fallback
is the dispatcher's job; a hidden SDK retry would double the latency of a failing
candidate), then ``config.options`` as extra keyword arguments (trusted: written by the
operator; they may override ``max_retries`` or set ``drop_params``, ``extra_headers``,
``api_version``...).

How the request body is passed through:

- Fields of the OpenAI request schema (:data:`OPENAI_PARAMS`) become keyword arguments, so
  litellm translates them for non-OpenAI providers.
- Every other field goes in ``extra_body`` (merged over ``options["extra_body"]``), which
  litellm forwards into the provider's JSON body without validation (checked against the
  fake upstream for OpenAI-compatible providers); but the fields of a provider's own API
  that litellm does not merge from ``extra_body`` (:data:`NATIVE_PARAMS`: Anthropic's
  ``top_k``, ``thinking``...) are keyword arguments too. They are never passed as keyword
  arguments: litellm treats many names (``api_base``, ``base_url``, ``api_key``,
  ``metadata``, ``mock_response``...) as its own controls, and a client must not be able to
  redirect the call, with our key, to another host.
- Prompt-cache hints (:mod:`backends.hosted.cache_hints`): Anthropic ``cache_control`` on
  the last stable block, OpenAI ``prompt_cache_key`` per tenant and prefix; hints the
  client set are kept; the key's scope (tenant, prefix hash) comes from the call's
  :class:`~backends.call.CallContext`.
- ``drop_params`` is left at litellm's default (off): a parameter the provider does not
  support fails loudly rather than being silently dropped; an operator can enable it per
  backend with ``options: {drop_params: true}``. ``litellm.UnsupportedParamsError`` is
  raised as a retryable :class:`BackendError` (code ``upstream_unsupported_params``), since
  another backend may support the parameter.

litellm is imported on first use (:func:`backends.hosted.sdk.load_litellm`), with
``LITELLM_LOCAL_MODEL_COST_MAP=True`` so the import never fetches the price map over the
network. HTTP connections are pooled by litellm's own client cache (keyed by key, base URL
and timeout), so :meth:`HostedBackend.aclose` has nothing to close.

Responses (``ModelResponse``, stream chunks) are converted to plain dicts with
``model_dump()`` and cut down to the keys of the OpenAI objects (:data:`OPENAI_KEYS`):
clients call the gateway as the OpenAI API, and litellm adds its own and the providers'
keys (``provider_specific_fields``, ``usage.cost``, Anthropic's ``inference_geo`` and
``cache_read_input_tokens``...). The gateway itself reads only ``usage.prompt_tokens``,
``completion_tokens`` and ``prompt_tokens_details.cached_tokens`` (litellm maps Anthropic's
cache reads there), all kept. Cache *writes* (Anthropic's ``cache_creation_input_tokens``)
have no OpenAI key: when the provider reports some and the backend's prices bill them above
the input price, the answer's cost is computed from litellm's usage before the cut
(:func:`backends.hosted.pricing.billed_cost`) and reported as the call's cost
(:class:`~backends.call.CallReport`), which the gateway records; the write counts are
reported the same way, for the outcome store
(:func:`backends.hosted.pricing.cache_write_counts`). Exceptions are
translated into :mod:`backends.errors` by :func:`translate_error`, the one edge.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import cached_property
from typing import Any

import httpx

from backends.base import Backend, Endpoint
from backends.call import NO_CONTEXT, CallContext, CallReport
from backends.catalog import resolve_pricing
from backends.config import Pricing
from backends.credentials import Redactor
from backends.errors import (BackendConnectError, BackendError, BackendServerError, BackendStreamError,
                             BackendTimeout, from_status)
from backends.hosted.cache_hints import add_cache_hints
from backends.hosted.embeddings import embedding_dict, embedding_kwargs
from backends.hosted.pricing import billed_cost, cache_write_counts
from backends.hosted.sdk import load_litellm
from backends.openai_shapes import ShapeError
from backends.vllm.upstream_text import retry_after_seconds, upstream_fields

OPENAI_PARAMS = frozenset({
    # chat.completions
    "messages", "frequency_penalty", "logit_bias", "logprobs", "top_logprobs", "max_tokens",
    "max_completion_tokens", "n", "presence_penalty", "response_format", "seed", "stop",
    "temperature", "top_p", "tools", "tool_choice", "parallel_tool_calls", "user", "functions",
    "function_call", "reasoning_effort", "modalities", "audio", "prediction", "service_tier",
    "web_search_options", "verbosity", "prompt_cache_key", "safety_identifier",
    # completions
    "prompt", "echo", "best_of", "suffix",
})
"""Request fields passed to litellm as keyword arguments (OpenAI API reference, chat
completions and legacy completions). ``store`` and ``metadata`` are not here: litellm uses
``metadata`` for its own logging, so they travel in ``extra_body``."""

NATIVE_PARAMS = {"anthropic": ("top_k", "thinking", "container", "mcp_servers", "context_management")}
"""Per litellm provider, request fields of the provider's own API (beside OpenAI's) passed as
keyword arguments, which litellm puts in the provider's body. The other fields go in
``extra_body``, which litellm merges into the body only for providers it calls through the
OpenAI SDK: for the others (Anthropic) it sends an ``extra_body`` key as it is, which the
provider refuses; hence the fields those providers take are named here (a name, never a
client's, so that no field can reach litellm's own controls)."""

OPENAI_KEYS = {
    "response": frozenset({"id", "object", "created", "model", "choices", "usage", "system_fingerprint",
                           "service_tier"}),
    "choice": frozenset({"index", "message", "delta", "text", "logprobs", "finish_reason"}),
    "message": frozenset({"role", "content", "refusal", "tool_calls", "function_call", "audio", "annotations",
                          "reasoning_content", "thinking_blocks"}),
    "usage": frozenset({"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details",
                        "completion_tokens_details"}),
    "prompt_tokens_details": frozenset({"cached_tokens", "audio_tokens"}),
    "completion_tokens_details": frozenset({"reasoning_tokens", "audio_tokens", "accepted_prediction_tokens",
                                            "rejected_prediction_tokens"}),
}
"""The keys kept in each part of a response or chunk: those of the OpenAI objects
(API reference: ``chat.completion``, ``chat.completion.chunk``, ``text_completion``, the
usage object), ``"message"`` standing for a chat message or a stream delta. Two extensions
are kept: ``reasoning_content``, the reasoning text of vLLM and DeepSeek (and litellm's for
Claude), and litellm's ``thinking_blocks``: Claude's extended-thinking blocks with their
signatures, which a client must send back on the assistant turn of a tool-use conversation
(litellm turns them back into Anthropic's thinking content; the gateway passes message
fields through)."""

_NONE_DROPPED = ("function_call", "audio")  # deprecated or on request only: absent, not null, in OpenAI's answers


class HostedBackend(Backend):
    """Backend calling a hosted provider through litellm; see the module docstring."""

    async def start(self) -> None:
        load_litellm()

    def call_kwargs(self, body: dict, context: CallContext = NO_CONTEXT) -> dict:
        """The litellm keyword arguments for request ``body`` (without ``stream``); the
        ``context``'s cache scope keys OpenAI's prompt cache."""
        cfg = self.config
        options = dict(cfg.options)
        extra = dict(options.pop("extra_body", None) or {})
        known: dict[str, Any] = {}
        for key, value in body.items():
            if key in ("model", "stream", "stream_options"):
                continue
            (known if key in OPENAI_PARAMS else extra)[key] = value
        for key in NATIVE_PARAMS.get(self.provider or "", ()):
            if key in extra:
                known[key] = extra.pop(key)
        kwargs: dict[str, Any] = {"max_retries": 0, **options, **known}
        if extra:
            kwargs["extra_body"] = extra
        kwargs["model"] = cfg.model
        kwargs["timeout"] = httpx.Timeout(cfg.timeout_s, connect=cfg.connect_timeout_s)
        if cfg.api_base:
            kwargs["api_base"] = cfg.api_base
        if cfg.api_key is not None:
            kwargs["api_key"] = cfg.api_key.get_secret_value()
        add_cache_hints(kwargs, self.provider, context.tenant, context.prefix_hash)
        return kwargs

    @property
    def provider(self) -> str | None:
        """litellm's provider for ``config.model`` (``openai``, ``anthropic``...), ``None`` if unknown."""
        if not hasattr(self, "_provider"):
            try:
                self._provider: str | None = load_litellm().get_llm_provider(self.config.model)[1]
            except Exception:  # noqa: BLE001  # unknown model strings fail later, in the call itself
                self._provider = None
        return self._provider

    async def _call(self, endpoint: Endpoint, kwargs: dict) -> Any:
        litellm = load_litellm()
        fn = litellm.acompletion if endpoint == "chat" else litellm.atext_completion
        return await fn(**kwargs)

    async def send(self, endpoint: Endpoint, body: dict, *, context: CallContext = NO_CONTEXT,
                   report: CallReport | None = None) -> dict:
        """Call the provider without streaming; return the response as an OpenAI dict.

        Raises:
            backends.errors.BackendError: see :func:`translate_error`.
        """
        try:
            response = await self._call(endpoint, self.call_kwargs(body, context))
        except Exception as exc:  # noqa: BLE001  # the edge: every provider failure is translated
            raise self._error(exc, started=False) from exc
        self._bill(response, report)
        return to_dict(response)

    async def stream(self, endpoint: Endpoint, body: dict, *, context: CallContext = NO_CONTEXT,
                     report: CallReport | None = None) -> AsyncIterator[dict]:
        """Call the provider with streaming; yield OpenAI chunk dicts, the last with ``usage``.

        Closing this generator closes litellm's stream and so the provider's HTTP response.

        Raises:
            backends.errors.BackendError: before the first chunk (retryable classes).
            backends.errors.BackendStreamError: after the first chunk.
        """
        kwargs = self.call_kwargs(body, context)
        options = {**(body.get("stream_options") or {}), "include_usage": True}
        kwargs.update(stream=True, stream_options=options)
        started = False
        try:
            response = await self._call(endpoint, kwargs)
        except Exception as exc:  # noqa: BLE001  # the edge
            raise self._error(exc, started=False) from exc
        held: list[dict] = []  # leading chunks that carry nothing (a role-only first delta)
        try:
            async for chunk in response:
                self._bill(chunk, report)
                data = to_dict(chunk)
                if not started and not _carries_output(data):
                    held.append(data)
                    continue
                started = True
                for early in held:
                    yield early
                held = []
                yield data
        except Exception as exc:  # noqa: BLE001  # the edge
            raise self._error(exc, started=started) from exc
        finally:
            await _close_stream(response)
        if not started:
            # litellm turns an answer that is not a stream (HTML, a JSON body) into one empty
            # chunk with finish_reason "stop": that is a failed call, not an empty answer
            # (no text, no tool call and no usage, where usage is always asked for).
            raise BackendServerError(f"{self.name}: the upstream stream carried no output and no usage "
                                     "(not an SSE stream?)", backend=self.name)

    async def embed(self, body: dict, *, context: CallContext = NO_CONTEXT, report: CallReport | None = None) -> dict:
        """``litellm.aembedding`` (:mod:`backends.hosted.embeddings`); errors: :func:`translate_error`."""
        try:
            return embedding_dict(await load_litellm().aembedding(**embedding_kwargs(self.config, body)))
        except ShapeError as exc:
            raise BackendServerError(f"{self.name}: upstream sent a malformed answer ({exc})", backend=self.name) from exc
        except Exception as exc:  # noqa: BLE001  # the edge: every provider failure is translated
            raise self._error(exc, started=False) from exc

    @cached_property
    def pricing(self) -> Pricing:
        """The backend's prices (:func:`backends.catalog.resolve_pricing`: the policy's, else litellm's map)."""
        return resolve_pricing(self.config)

    def _bill(self, raw: Any, report: CallReport | None) -> None:
        """Report the cost of ``raw``'s litellm usage (the answer, or a chunk, before
        :func:`to_dict` cuts it) when its cache writes change the price, and its cache-write
        counts when the provider reports them (see the module docstring)."""
        usage = raw.get("usage") if isinstance(raw, dict) else getattr(raw, "usage", None)
        if not usage or report is None:  # every stream chunk but the last
            return
        cost = billed_cost(self.pricing, usage)
        if cost is not None:
            report.cost_usd = cost
        written = cache_write_counts(usage)
        if written is not None:
            report.cache_write(written["tokens"], written["tokens_1h"])

    def _error(self, exc: Exception, *, started: bool) -> BackendError:
        return translate_error(exc, backend=self.name, started=started, redact=self.redact)


def _carries_output(chunk: dict) -> bool:
    """Whether a streamed chunk holds text, a tool or function call, or usage."""
    if chunk.get("usage"):
        return True
    for choice in chunk.get("choices") or ():
        delta = choice.get("delta") or {}
        if delta.get("content") or delta.get("tool_calls") or delta.get("function_call") or choice.get("text") \
                or delta.get("refusal") or delta.get("reasoning_content"):
            return True
    return False


_NO_PROVIDER = "LLM Provider NOT provided"
"""The start of litellm's message when it cannot resolve a model's provider
(``litellm_core_utils/get_llm_provider_logic.py``)."""


def translate_error(exc: Exception, *, backend: str, started: bool = False, secret: str = "",
                    redact: Redactor | None = None) -> BackendError:
    """Translate an exception raised by a litellm call into the most specific
    :class:`BackendError`.

    - after the first streamed chunk: :class:`BackendStreamError`;
    - an already translated :class:`BackendError`: itself;
    - ``litellm.Timeout`` (or any ``httpx.TimeoutException`` / ``openai.APITimeoutError``):
      :class:`BackendTimeout`;
    - a connect failure anywhere in the cause chain (litellm reports it as
      ``InternalServerError("Connection error.")``): :class:`BackendConnectError`;
    - ``litellm.UnsupportedParamsError``: retryable :class:`BackendError`;
    - litellm's "LLM Provider NOT provided" (a model it cannot assign a provider to; a
      ``BadRequestError`` raised before any call): retryable :class:`BackendError` with code
      ``upstream_unavailable``, the backend's fault like a bad provider key;
    - anything with an HTTP ``status_code`` (``RateLimitError`` 429, ``BadRequestError`` 400,
      ``InternalServerError`` 500, ``ServiceUnavailableError`` 503, ...):
      :func:`backends.errors.from_status`, with the ``param`` and ``code`` of the upstream's
      error body; ``ContextWindowExceededError`` (litellm's class for every provider's way
      of saying so) has code ``context_length_exceeded``;
    - anything else: :class:`BackendError`.

    The message passes through ``redact`` (the backend's :class:`~backends.credentials.Redactor`:
    its API key and the user info of its ``api_base``), or masks ``secret`` alone.
    """
    if isinstance(exc, BackendError):
        return exc
    text = str(getattr(exc, "message", "") or exc) or type(exc).__name__
    text = (redact or Redactor([secret]))(text)
    message = f"{backend}: {text[:500]}"
    if started:
        return BackendStreamError(message, backend=backend)
    litellm = load_litellm()
    if isinstance(exc, (litellm.Timeout, httpx.TimeoutException)) or _caused_by(exc, httpx.TimeoutException):
        if not _caused_by(exc, httpx.ConnectTimeout):
            return BackendTimeout(message, backend=backend, upstream_status=getattr(exc, "status_code", None))
    if _caused_by(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
        return BackendConnectError(message, backend=backend)
    if isinstance(exc, litellm.UnsupportedParamsError):
        return BackendError(message, backend=backend, code="upstream_unsupported_params")
    if isinstance(exc, litellm.BadRequestError) and _NO_PROVIDER in text:
        # litellm cannot tell which provider serves the policy's model: the backend's
        # configuration is wrong, not the request (another candidate can still answer).
        return BackendError(message, backend=backend, code="upstream_unavailable")
    status = getattr(exc, "status_code", None)
    if isinstance(status, int) and 400 <= status < 600:
        param, code = upstream_fields(_body(exc))
        if isinstance(exc, litellm.ContextWindowExceededError):
            code = "context_length_exceeded"
        error = from_status(status, message, backend=backend, param=param, code=code)
        seconds = retry_after_seconds(_header(exc, "retry-after")) if status == 429 else None
        if seconds is not None:
            error.headers = {"retry-after": seconds}  # as a vllm replica's: the client learns when to retry
        return error
    return BackendError(message, backend=backend)


def _header(exc: BaseException, name: str) -> str | None:
    """Header ``name`` of the upstream answer a litellm exception carries (its ``response``,
    or ``litellm_response_headers``), if any."""
    for headers in (getattr(getattr(exc, "response", None), "headers", None),
                    getattr(exc, "litellm_response_headers", None)):
        try:
            value = headers.get(name) if headers is not None else None
        except AttributeError:
            value = None
        if value is not None:
            return str(value)
    return None


def _body(exc: BaseException) -> bytes:
    """The body of the upstream answer a litellm exception carries (its ``response``), or ``b""``."""
    try:
        content = exc.response.content  # type: ignore[attr-defined]
    except (AttributeError, RuntimeError, httpx.HTTPError):  # no response, or one never read
        return b""
    return content if isinstance(content, bytes) else b""


def _caused_by(exc: BaseException, types: type | tuple[type, ...]) -> bool:
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, types):
            return True
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__ or getattr(cur, "original_exception", None)
    return False


def to_dict(obj: Any) -> dict:
    """A litellm response or chunk as a plain OpenAI dict: keys outside :data:`OPENAI_KEYS`
    dropped, and a ``None`` ``text`` (litellm's last legacy completions chunk) made ``""``."""
    out = obj.model_dump() if hasattr(obj, "model_dump") else dict(obj)
    _keep(out, "response")
    for choice in out.get("choices") or []:
        _keep(choice, "choice")
        for key in ("message", "delta"):
            if isinstance(choice.get(key), dict):
                _keep(choice[key], "message")
                for name in _NONE_DROPPED:
                    if name in choice[key] and choice[key][name] is None:
                        del choice[key][name]
        if "text" in choice and choice["text"] is None:
            choice["text"] = ""
    usage = out.get("usage")
    if isinstance(usage, dict):
        _keep(usage, "usage")
        for key in ("prompt_tokens_details", "completion_tokens_details"):
            if isinstance(usage.get(key), dict):
                _keep(usage[key], key)
    return out


def _keep(d: dict, part: str) -> None:
    for key in [k for k in d if k not in OPENAI_KEYS[part]]:
        del d[key]


async def _close_stream(response: Any) -> None:
    """Close a litellm stream wrapper (its ``aclose``, or its inner stream's)."""
    for target in (response, getattr(response, "completion_stream", None)):
        close = getattr(target, "aclose", None)
        if close is not None:
            await close()
            return
