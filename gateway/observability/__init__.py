"""Observability: Prometheus metrics (:mod:`.metrics`), OpenTelemetry traces
(:mod:`.tracing`) and the request-path hooks that feed both (:mod:`.hooks`).

``install(app)`` gives the app its own metrics registry and tracer, the middleware and
``GET /metrics``. The request path calls the hooks re-exported here (``decide``,
``record_decision``, ``send``, ``first_chunk``, ``finisher``); each is a plain pass-through
outside an HTTP request. See ``docs/OBSERVABILITY.md``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.observability.hooks import decide, finisher, first_chunk, record_decision, send
from gateway.observability.metrics import Metrics
from gateway.observability.settings import ObservabilitySettings
from gateway.observability.tracing import Tracing

__all__ = ["Observability", "install", "decide", "finisher", "first_chunk", "record_decision", "send"]


@dataclass
class Observability:
    """One app's metrics and tracing (``app.state.observability``)."""

    metrics: Metrics = field(default_factory=Metrics)
    tracing: Tracing = field(default_factory=Tracing)


def install(app, settings: ObservabilitySettings | None = None) -> Observability:
    """Add metrics, tracing (per ``settings``, read from the environment when ``None``), the
    middleware and ``GET /metrics`` to ``app``.

    Returns:
        The app's :class:`Observability`; tests may replace its ``tracing``.
    """
    from gateway.api import metrics as metrics_api
    from gateway.observability.hooks import ObservabilityMiddleware

    obs = Observability(Metrics(), Tracing.from_settings(settings or ObservabilitySettings()))
    app.state.observability = obs
    app.add_middleware(ObservabilityMiddleware, obs=obs)
    app.include_router(metrics_api.router)
    return obs
