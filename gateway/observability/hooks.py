"""The calls the request path makes into observability, one line each at its call site.

A pure ASGI middleware (:class:`ObservabilityMiddleware`) puts a :class:`RequestObs` in a
context variable for each HTTP request; the hooks below find it there. Outside a request
(the replay command, unit tests of dispatch) every hook just does the underlying call.

Per backend attempt the pool gauges move like this::

    attempt starts            in_flight +1, queue_depth +1
    first token / response    queue_depth -1
    attempt fails             in_flight -1 (and queue_depth -1 if still waiting)
    response returned (JSON)  in_flight -1
    stream ends (finisher)    in_flight -1
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from backends.call import NO_CONTEXT, CallContext, CallReport
from gateway.observability import tracing as tr

if TYPE_CHECKING:
    from gateway.observability import Observability
    from router.engine import Decision, Router, RoutingRequest
    from router.records import DecisionRecord, OutcomeRecord

log = logging.getLogger("mixroute.observability")

_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

_current: ContextVar[RequestObs | None] = ContextVar("mixroute_request_obs", default=None)


@dataclass
class _OpenAttempt:
    pool: str
    span: Any
    waiting: bool = True


class RequestObs:
    """Observability state of one HTTP request (its attempt still open, if any)."""

    def __init__(self, obs: Observability) -> None:
        self.obs = obs
        self.open: _OpenAttempt | None = None

    def begin(self, backend, endpoint: str, body: dict) -> _OpenAttempt:
        self.close()  # a previous attempt that was never closed
        m = self.obs.metrics
        m.child(m.in_flight, backend.name).inc()
        m.child(m.queue_depth, backend.name).inc()
        op = tr.OPERATIONS.get(endpoint, endpoint)
        span = self.obs.tracing.start(f"{op} {backend.model}", tr.attempt_attributes(backend, endpoint, body))
        self.open = _OpenAttempt(backend.name, span)
        return self.open

    def first_token(self, response: dict | None = None) -> None:
        a = self.open
        if a is not None and a.waiting:
            a.waiting = False
            self.obs.metrics.child(self.obs.metrics.queue_depth, a.pool).dec()
            if response is not None:
                tr.set_attributes(a.span, tr.response_attributes(response))

    def close(self, error: BaseException | str | None = None, usage: dict | None = None) -> None:
        a, self.open = self.open, None
        if a is None:
            return
        if a.waiting:
            self.obs.metrics.child(self.obs.metrics.queue_depth, a.pool).dec()
        self.obs.metrics.child(self.obs.metrics.in_flight, a.pool).dec()
        if usage is not None:
            tr.set_attributes(a.span, usage)
        tr.end(a.span, error)


def current() -> RequestObs | None:
    return _current.get()


class ObservabilityMiddleware:
    """Pure ASGI middleware: request context, HTTP response counter and the server span."""

    def __init__(self, app, obs: Observability) -> None:
        self.app = app
        self.obs = obs

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        ctx = RequestObs(self.obs)
        token = _current.set(ctx)
        code = 500

        async def send_wrapper(message) -> None:
            nonlocal code
            if message["type"] == "http.response.start":
                code = message["status"]
            await send(message)

        method = scope.get("method", "")
        method = method if method in _METHODS else "_OTHER"  # a label: clients may send any token
        try:
            with self.obs.tracing.span(f"{method} {scope.get('path', '')}", {"http.request.method": method,
                                       "url.path": scope.get("path")}, kind="SERVER") as span:
                try:
                    await self.app(scope, receive, send_wrapper)
                finally:
                    # A mounted app (the dashboard's static files) has no route: label it by
                    # its mount path, so that "unmatched" keeps meaning no route (a 404).
                    path = getattr(scope.get("route"), "path", None) or scope.get("root_path") or "unmatched"
                    tr.set_attributes(span, {"http.route": path, "http.response.status_code": code})
                    if span is not None:
                        span.update_name(f"{method} {path}")
                    self.obs.metrics.child(self.obs.metrics.http, path, method, str(code)).inc()
                    ctx.close()
        finally:
            _current.reset(token)


async def decide(router: Router, req: RoutingRequest) -> Decision:
    """``router.decide(req)``, timed (``mixroute_decision_latency_seconds``) and traced."""
    ctx = _current.get()
    if ctx is None:
        return await router.decide(req)
    started = time.perf_counter()
    if ctx.obs.tracing.enabled:
        req.span = ctx.obs.tracing.span
    with ctx.obs.tracing.span("mixroute.decide", {"mixroute.endpoint": req.endpoint, "mixroute.tenant": req.tenant,
                                                  "mixroute.request_id": req.request_id}) as span:
        try:
            decision = await router.decide(req)
        except BaseException:
            ctx.obs.metrics.observe_decision("error", time.perf_counter() - started)
            raise
        rec = decision.record
        ctx.obs.metrics.observe_decision(rec.route, time.perf_counter() - started)
        tr.set_attributes(span, {"mixroute.route": rec.route, "mixroute.chosen": rec.chosen,
                                 "mixroute.reason": rec.reason, "mixroute.policy_hash": rec.policy_hash,
                                 "mixroute.candidates": len(rec.candidates), "mixroute.quality_bar": decision.bar,
                                 "mixroute.predictor": rec.signals.get("predictor"),
                                 "mixroute.prefix_hash": rec.prefix_hash,
                                 "mixroute.rewrite.moved": sum(((rec.signals.get("rewrite") or {}).get("moved")
                                                                or {}).values())})
    return decision


class TracedPredictor:
    """Wraps a :class:`router.predict.Predictor` so each prediction is a ``mixroute.classify``
    span (child of ``mixroute.decide``); attributes carry the predictor and the domain
    signal, never the prompt."""

    def __init__(self, inner) -> None:
        self.inner = inner

    def __getattr__(self, name: str):  # batcher, heads, ...: the wrapped predictor's
        return getattr(self.inner, name)

    async def predict(self, text: str, backends):
        ctx = _current.get()
        if ctx is None:
            return await self.inner.predict(text, backends)
        with ctx.obs.tracing.span("mixroute.classify", {"mixroute.candidates": len(backends)}) as span:
            prediction = await self.inner.predict(text, backends)
            tr.set_attributes(span, {"mixroute.predictor": prediction.source,
                                     "mixroute.domain": prediction.signals.get("domain")})
        return prediction


def record_decision(store, record: DecisionRecord) -> None:
    """``store.record_decision(record)`` inside a ``mixroute.store.record`` span."""
    ctx = _current.get()
    if ctx is None or not ctx.obs.tracing.enabled:
        store.record_decision(record)
        return
    with ctx.obs.tracing.span("mixroute.store.record", {"mixroute.store.table": "decisions"}):
        store.record_decision(record)


def _call(backend, endpoint: str, body: dict, context: CallContext, report: CallReport) -> Awaitable[dict]:
    """The backend's non-streaming call for ``endpoint``: ``embed`` for embeddings, else ``send``."""
    if endpoint == "embeddings":
        return backend.embed(body, context=context, report=report)
    return backend.send(endpoint, body, context=context, report=report)


async def send(backend, endpoint: str, body: dict, *, context: CallContext = NO_CONTEXT,
               report: CallReport | None = None) -> dict:
    """``await backend.send(endpoint, body, ...)`` (``backend.embed(body, ...)`` for
    ``embeddings``) as one observed attempt."""
    report = report if report is not None else CallReport()
    ctx = _current.get()
    if ctx is None:
        return await _call(backend, endpoint, body, context, report)
    ctx.begin(backend, endpoint, body)
    try:
        resp = await _call(backend, endpoint, body, context, report)
    except BaseException as exc:
        ctx.close(error=exc)
        raise
    ctx.first_token(resp)
    usage = resp.get("usage") or {}
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    ctx.close(usage=tr.usage_attributes(usage.get("prompt_tokens"), usage.get("completion_tokens"), cached,
                                        report.cache_write_tokens)
              if usage else None)
    return resp


async def first_chunk(backend, endpoint: str, body: dict, chunks: AsyncIterator[dict]) -> dict:
    """``await chunks.__anext__()`` as the start of one observed stream attempt; the attempt
    stays open until the request's finisher runs (or the request ends)."""
    ctx = _current.get()
    if ctx is None:
        return await chunks.__anext__()
    ctx.begin(backend, endpoint, body)
    try:
        first = await chunks.__anext__()
    except BaseException as exc:
        ctx.close(error="upstream_empty_stream" if isinstance(exc, StopAsyncIteration) else exc)
        raise
    ctx.first_token(first)
    return first


def finisher(decision: DecisionRecord, finish: Callable[[OutcomeRecord], None]) -> Callable[[OutcomeRecord], None]:
    """Wrap a request's ``finish(outcome)``: close the open attempt with the outcome's usage,
    count the outcome in the metrics, and trace the outcome's store write."""
    ctx = _current.get()
    if ctx is None:
        return finish

    def observed(outcome: OutcomeRecord) -> None:
        usage = tr.usage_attributes(outcome.tokens_in, outcome.tokens_out, outcome.tokens_cached,
                                    outcome.tokens_cache_write)
        ctx.close(error=outcome.error_code or "error" if outcome.status == "error" else None, usage=usage)
        try:
            ctx.obs.metrics.observe_outcome(decision, outcome)
        except Exception:  # metrics must never fail a request
            log.exception("recording metrics of an outcome failed")
        finally:
            with ctx.obs.tracing.span("mixroute.store.record", {"mixroute.store.table": "outcomes",
                                                                 "mixroute.status": outcome.status}):
                finish(outcome)

    return observed
