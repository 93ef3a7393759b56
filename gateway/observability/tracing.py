"""OpenTelemetry traces, off by default and imported lazily.

Enabled when ``MIXROUTE_OTEL=1`` or ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) is set, unless ``OTEL_SDK_DISABLED=true``. Spans go
to the OTLP/HTTP exporter, which reads the standard ``OTEL_EXPORTER_OTLP_*`` variables
(endpoint, headers, timeout, compression); ``OTEL_SERVICE_NAME`` and
``OTEL_RESOURCE_ATTRIBUTES`` name the resource. When disabled, no ``opentelemetry``
module is imported and every span helper is a no-op.

Spans per completion request (attribute names follow the OpenTelemetry GenAI semantic
conventions where one exists, ``mixroute.*`` otherwise)::

    POST /v1/chat/completions            SERVER   http.request.method, http.route, http.response.status_code
    |- mixroute.decide                  INTERNAL mixroute.route, mixroute.chosen, mixroute.reason, ...
    |- mixroute.store.record            INTERNAL mixroute.store.table=decisions
    |- chat {gen_ai.request.model}      CLIENT   one per backend attempt: gen_ai.operation.name,
    |                                             gen_ai.provider.name, gen_ai.request.model,
    |                                             gen_ai.request.max_tokens/temperature/top_p,
    |                                             gen_ai.response.model, gen_ai.response.id,
    |                                             gen_ai.response.finish_reasons,
    |                                             gen_ai.usage.input_tokens/output_tokens/
    |                                             cache_read.input_tokens/cache_creation.input_tokens,
    |                                             error.type
    '- mixroute.store.record            INTERNAL mixroute.store.table=outcomes

Prompts and completions are never put on spans: only the numeric and name fields above are
read from request and response bodies (:data:`REQUEST_PARAMS`).
"""

from __future__ import annotations

import logging
from contextlib import nullcontext
from typing import Any

log = logging.getLogger("mixroute.tracing")

REQUEST_PARAMS = {"max_tokens": "gen_ai.request.max_tokens", "max_completion_tokens": "gen_ai.request.max_tokens",
                  "temperature": "gen_ai.request.temperature", "top_p": "gen_ai.request.top_p",
                  "seed": "gen_ai.request.seed"}
"""The only request-body keys copied onto spans (numbers; never ``messages`` or ``prompt``)."""
OPERATIONS = {"chat": "chat", "completions": "text_completion"}


class Tracing:
    """Span helpers over one :class:`opentelemetry.sdk.trace.TracerProvider`, or no-ops.

    Args:
        provider: a tracer provider (tests pass one with an in-memory exporter);
            ``None`` disables tracing.
    """

    def __init__(self, provider: Any = None) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer("mixroute") if provider is not None else None

    @property
    def enabled(self) -> bool:
        return self.tracer is not None

    @classmethod
    def from_settings(cls, settings) -> Tracing:
        """Tracing per ``settings`` (:class:`gateway.observability.settings.ObservabilitySettings`).

        A missing OpenTelemetry SDK with tracing asked for logs a warning and disables it.
        """
        if not settings.tracing_enabled:
            return cls(None)
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
        except ImportError as exc:
            log.warning("tracing asked for but OpenTelemetry is not installed (%s): pip install 'mixroute[otel]'",
                        exc)
            return cls(None)
        # Resource.create reads OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES; the exporter reads
        # OTEL_EXPORTER_OTLP_*; so the standard variables configure everything.
        resource = Resource.create({} if settings.service_name_from_env else {"service.name": "mixroute"})
        provider = TracerProvider(resource=resource)
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        log.info("OpenTelemetry tracing on (OTLP/HTTP)")
        return cls(provider)

    def span(self, name: str, attributes: dict[str, Any] | None = None, kind: str = "INTERNAL"):
        """A context manager: the span as current (records exceptions), or ``None`` when off."""
        if self.tracer is None:
            return nullcontext()
        from opentelemetry.trace import SpanKind

        return self.tracer.start_as_current_span(name, kind=SpanKind[kind], attributes=_clean(attributes))

    def start(self, name: str, attributes: dict[str, Any] | None = None, kind: str = "CLIENT") -> Any:
        """A started span (not made current), or ``None`` when off; end it with :func:`end`."""
        if self.tracer is None:
            return None
        from opentelemetry.trace import SpanKind

        return self.tracer.start_span(name, kind=SpanKind[kind], attributes=_clean(attributes))

    def shutdown(self) -> None:
        if self.provider is not None:
            self.provider.shutdown()


def set_attributes(span: Any, attributes: dict[str, Any]) -> None:
    if span is not None:
        span.set_attributes(_clean(attributes))


def end(span: Any, error: BaseException | str | None = None) -> None:
    """End ``span``; with ``error`` (an exception or a stable error code), mark it failed with
    ``error.type`` = the error's stable ``code``, else its class name."""
    if span is None:
        return
    if error is not None:
        from opentelemetry.trace import Status, StatusCode

        kind = error if isinstance(error, str) else getattr(error, "code", None) or type(error).__name__
        span.set_attribute("error.type", kind)
        span.set_status(Status(StatusCode.ERROR, kind))
    span.end()


def attempt_attributes(backend, endpoint: str, body: dict) -> dict[str, Any]:
    """GenAI request attributes of one backend attempt (never the prompt)."""
    attrs: dict[str, Any] = {
        "gen_ai.operation.name": OPERATIONS.get(endpoint, endpoint),
        "gen_ai.provider.name": backend.config.kind,
        "gen_ai.request.model": backend.model,
        "mixroute.backend": backend.name,
    }
    for key, attr in REQUEST_PARAMS.items():
        value = body.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            attrs[attr] = value
    return attrs


def response_attributes(resp: dict) -> dict[str, Any]:
    """GenAI response attributes of an OpenAI response or first stream chunk (never its text)."""
    attrs: dict[str, Any] = {"gen_ai.response.model": resp.get("model"), "gen_ai.response.id": resp.get("id")}
    reasons = [c.get("finish_reason") for c in resp.get("choices") or () if c.get("finish_reason")]
    if reasons:
        attrs["gen_ai.response.finish_reasons"] = reasons
    return attrs


def usage_attributes(tokens_in: int, tokens_out: int, tokens_cached: int,
                     tokens_cache_write: int | None = None) -> dict[str, Any]:
    """GenAI usage attributes (tokens); ``tokens_cache_write`` (prompt tokens written to the
    provider's cache) is left off when ``None``, i.e. not reported by the backend."""
    return {"gen_ai.usage.input_tokens": tokens_in, "gen_ai.usage.output_tokens": tokens_out,
            "gen_ai.usage.cache_read.input_tokens": tokens_cached,
            "gen_ai.usage.cache_creation.input_tokens": tokens_cache_write}


def _clean(attributes: dict[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (attributes or {}).items() if v is not None and isinstance(v, (str, bool, int, float, list))}
