"""Prometheus metrics of one gateway app, in the app's own registry.

Each app gets its own :class:`prometheus_client.CollectorRegistry` (never the global
default), so several apps in one process (tests) never collide. Labels are low
cardinality only: route, backend, pool (= backend), tenant and status; never request ids
or model names chosen by clients (``route`` is always a route or backend of the policy).

Names, types and labels (documented in ``docs/OBSERVABILITY.md``)::

    mixroute_requests_total{route,backend,status}             counter   one per outcome
    mixroute_http_responses_total{path,method,code}          counter   every HTTP response
    mixroute_decision_latency_seconds{route}                 histogram router decide()
    mixroute_ttft_seconds{backend}                           histogram time to first token
    mixroute_itl_seconds{backend}                            histogram mean inter-token latency
    mixroute_request_latency_seconds{backend}                histogram request to last byte
    mixroute_tokens_total{tenant,route,backend,kind}         counter   kind=input|output|cached|cache_write
    mixroute_cost_usd_total{tenant,route,backend}            counter   USD
    mixroute_fallbacks_total{route,backend}                  counter   failed attempts before the answer
    mixroute_pool_in_flight{pool}                            gauge     requests sent, not finished
    mixroute_pool_queue_depth{pool}                          gauge     requests sent, no first token yet
    mixroute_prefix_cache_hit_ratio{backend}                 gauge     cached / input tokens since start
    mixroute_classifier_latency_seconds                      histogram (filled by observe_classifier)
    mixroute_classifier_batch_size                           histogram (filled by observe_classifier)
    mixroute_store_rows_total{result}                        counter   store writer stats
    mixroute_store_queue_rows                                gauge     rows waiting in the write queue
    mixroute_store_journal_bytes                             gauge     size of the spill journal
    mixroute_feedback_total{route,verdict}                   counter   feedback rows in the store
    mixroute_judge_total{result}                             counter   answers offered to the judge (gateway/judge.py)
    mixroute_judge_cost_usd_total                            counter   USD the judge's calls cost
    mixroute_rejections_total{tenant,reason}                 counter   refused requests (reason: error code)
    mixroute_tenant_budget_usd{tenant,period}                gauge     a tenant's budget (store, per scrape)
    mixroute_tenant_spent_usd{tenant,period}                 gauge     its spend this period (USD)
    mixroute_tenant_budget_left_usd{tenant,period}           gauge     budget minus spend, at least 0
    mixroute_spend_rate_usd_per_minute{scope,name}           gauge     short-window spend rate (runaway check)
    mixroute_spend_baseline_usd_per_minute{scope,name}       gauge     its EWMA baseline
    mixroute_runaway_active{scope,name}                      gauge     1 while the runaway check is fired
    mixroute_runaway_events_total{scope,name,action}         counter   times it fired (alert|throttle) or cleared
    mixroute_replica_*{backend,replica}                      gauge     vllm replicas (:mod:`.replicas`)
    mixroute_sessions_live                                   gauge     sessions within their idle time
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from sqlalchemy.exc import SQLAlchemyError

from gateway.auth.admin_ops import Spend, tenant_budgets
from gateway.observability.replicas import ReplicaCollector
from router.records import DecisionRecord, OutcomeRecord

log = logging.getLogger("mixroute.metrics")

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
"""Seconds; TTFT of hosted models is typically 0.2-2 s, long generations reach minutes."""
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.035, 0.05, 0.075, 0.1, 0.2, 0.5, 1.0)
"""Seconds per token (a chunk); decode at 10-100 tokens/s gives 0.01-0.1 s."""
DECIDE_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
"""Seconds; decide() is sub-millisecond on priors, a few ms with the classifier."""
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)
FEEDBACK_CACHE_S = 30.0
"""How long the feedback counts are reused between scrapes (seconds): one small query per 30 s."""
BUDGET_CACHE_S = 5.0
"""How long the tenants' budget figures are reused between scrapes (seconds): fresh enough to
agree with the admin API, at most one grouped spend query per period kind every 5 s."""


class Metrics:
    """The instruments of one app. Recording methods never raise into the request path."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter("mixroute_requests", "Completed requests (one per outcome row).",
                                ["route", "backend", "status"], registry=r)
        self.http = Counter("mixroute_http_responses", "HTTP responses by path template.",
                            ["path", "method", "code"], registry=r)
        self.decide = Histogram("mixroute_decision_latency_seconds", "Time the router takes to decide (s).",
                                ["route"], buckets=DECIDE_BUCKETS, registry=r)
        self.ttft = Histogram("mixroute_ttft_seconds", "Time to first token per backend (s); for "
                              "non-streaming requests the time to the full answer.", ["backend"],
                              buckets=LATENCY_BUCKETS, registry=r)
        self.itl = Histogram("mixroute_itl_seconds", "Mean inter-token latency of a stream (s).", ["backend"],
                             buckets=ITL_BUCKETS, registry=r)
        self.latency = Histogram("mixroute_request_latency_seconds", "Request to last byte (s).", ["backend"],
                                 buckets=LATENCY_BUCKETS, registry=r)
        self.tokens = Counter("mixroute_tokens", ("Tokens by kind (input, output, cached: read from a prompt cache, "
                               "cache_write: written to one; both part of input)."),
                              ["tenant", "route", "backend", "kind"], registry=r)
        self.cost = Counter("mixroute_cost_usd", "Cost of calls (USD).", ["tenant", "route", "backend"], registry=r)
        self.rejections = Counter("mixroute_rejections", "Refused requests by tenant and reason (the error "
                                  "code: budget_exceeded, rate_limit_exceeded, spend_rate_throttled, ...).",
                                  ["tenant", "reason"], registry=r)
        self.fallbacks = Counter("mixroute_fallbacks", "Failed backend attempts followed by another one.",
                                 ["route", "backend"], registry=r)
        self.in_flight = Gauge("mixroute_pool_in_flight", "Requests sent to a pool (backend) and not finished.",
                               ["pool"], registry=r)
        self.queue_depth = Gauge("mixroute_pool_queue_depth", "Requests sent to a pool that have not received "
                                 "their first token: the autoscaling signal.", ["pool"], registry=r)
        self.classifier_latency = Histogram("mixroute_classifier_latency_seconds", "One classifier batch (s).",
                                            buckets=DECIDE_BUCKETS, registry=r)
        self.classifier_batch = Histogram("mixroute_classifier_batch_size", "Prompts per classifier batch.",
                                          buckets=BATCH_BUCKETS, registry=r)
        self.judge = Counter("mixroute_judge", "Answers offered to the judge by result (graded, unparsed, "
                             "error, over_cap, not_allowed, dropped).", ["result"], registry=r)
        self.judge_cost = Counter("mixroute_judge_cost_usd", "Cost of the judge's calls (USD).", registry=r)
        self._children: dict[tuple, object] = {}
        self._prefix: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # backend -> [cached, input]
        self._lock = threading.Lock()
        self.scraped = ScrapeCollector(self)
        r.register(self.scraped)
        self.replicas = ReplicaCollector()
        r.register(self.replicas)

    # -- recording (called from the request path) ---------------------------------------

    def child(self, metric, *labels: str):
        """``metric.labels(*labels)``, memoised: prometheus_client validates the values and
        takes a lock on every ``labels()`` call, about a dozen times per request here. The
        memo holds exactly the children the metric holds (none is ever removed)."""
        key = (id(metric), labels)
        c = self._children.get(key)
        if c is None:
            c = self._children[key] = metric.labels(*labels)
        return c

    def observe_decision(self, route: str, seconds: float) -> None:
        self.child(self.decide, route).observe(seconds)

    def observe_outcome(self, decision: DecisionRecord, outcome: OutcomeRecord) -> None:
        """Count one finished request (tokens in tokens, cost in USD, times in seconds)."""
        route, tenant, backend = decision.route or "-", decision.tenant or "-", outcome.backend or "-"
        self.child(self.requests, route, backend, outcome.status).inc()
        if outcome.status == "rejected":
            self.child(self.rejections, tenant, outcome.error_code or "-").inc()
        for failed in outcome.fallbacks_taken:
            self.child(self.fallbacks, route, failed).inc()
        if outcome.ttft_s is not None and outcome.status != "error":
            self.child(self.ttft, backend).observe(outcome.ttft_s)
        if outcome.itl_s is not None:
            self.child(self.itl, backend).observe(outcome.itl_s)
        if outcome.latency_s is not None:
            self.child(self.latency, backend).observe(outcome.latency_s)
        for kind, n in (("input", outcome.tokens_in), ("output", outcome.tokens_out), ("cached", outcome.tokens_cached),
                        ("cache_write", outcome.tokens_cache_write)):
            if n:
                self.child(self.tokens, tenant, route, backend, kind).inc(n)
        if outcome.cost_usd:
            self.child(self.cost, tenant, route, backend).inc(outcome.cost_usd)
        if outcome.tokens_in:
            with self._lock:
                acc = self._prefix[backend]
                acc[0] += outcome.tokens_cached
                acc[1] += outcome.tokens_in

    def observe_classifier(self, latency_s: float, batch_size: int) -> None:
        """Record one classifier batch: its encoder + heads time (seconds) and size (prompts).

        The classifier (``router/classify``) does not import the gateway; the gateway can pass
        this bound method to it as a callback.
        """
        self.classifier_latency.observe(latency_s)
        self.classifier_batch.observe(batch_size)

    def prefix_ratios(self) -> dict[str, float]:
        with self._lock:
            return {b: c / i for b, (c, i) in self._prefix.items() if i}


class ScrapeCollector(Collector):
    """Values read at scrape time: prefix-cache ratio, live sessions, store stats and
    feedback counts.

    ``store`` and ``sessions`` (the session store, :mod:`gateway.sessions`) are attached at
    scrape time by ``GET /metrics`` (``None`` before).
    """

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self.store: Any = None
        self.runaway: Any = None  # the app's gateway.limits.runaway.RunawayWatch
        self.sessions: Any = None
        self._feedback: tuple[float, list[tuple[str, str, int]] | None] = (float("-inf"), None)
        self._budgets: tuple[float, list[tuple[str, Spend]] | None] = (float("-inf"), None)

    def describe(self) -> list:
        return []  # values appear only once the store exists; nothing to check at register time

    def collect(self) -> Iterator:
        ratio = GaugeMetricFamily("mixroute_prefix_cache_hit_ratio",
                                  "Cached input tokens / input tokens since start, per backend.", labels=["backend"])
        for backend, value in sorted(self.metrics.prefix_ratios().items()):
            ratio.add_metric([backend], value)
        yield ratio
        if self.runaway is not None:
            yield from _runaway_families(self.runaway)
        if self.sessions is not None:
            # In process: this process's sessions; with Redis: those this replica served
            # within their idle time (each replica reports its own, sum them).
            yield GaugeMetricFamily("mixroute_sessions_live", "Sessions within their idle time (this replica's).",
                                    value=self.sessions.live())
        store = self.store
        if store is None:
            return
        rows = CounterMetricFamily("mixroute_store_rows", "Store rows by result (written, overflowed, "
                                   "spilled, replayed, rejected, lost).", labels=["result"])
        for name, value in vars(store.stats).items():
            rows.add_metric([name], value)
        yield rows
        yield GaugeMetricFamily("mixroute_store_queue_rows", "Rows waiting in the store's write queue.",
                                value=store.queued)
        yield GaugeMetricFamily("mixroute_store_journal_bytes", "Bytes of journaled rows waiting for replay.",
                                value=_journal_bytes(store.journal))
        feedback = self._feedback_counts(store.engine)
        if feedback is not None:
            fam = CounterMetricFamily("mixroute_feedback", "Feedback rows in the store by route and verdict "
                                      "(bad = a quality-bar miss).", labels=["route", "verdict"])
            for route, verdict, n in feedback:
                fam.add_metric([route, verdict], n)
            yield fam
        yield from self._budget_gauges(store.engine)

    def _budget_gauges(self, engine) -> Iterator:
        at, budgets = self._budgets
        if time.monotonic() - at >= BUDGET_CACHE_S:
            try:
                budgets = tenant_budgets(engine) if engine is not None else None
            except SQLAlchemyError as exc:  # the scrape still answers with everything else
                log.warning("budget gauges: the store cannot be read (%s)", type(exc).__name__)
                budgets = None
            self._budgets = (time.monotonic(), budgets)
        if budgets is None:
            return
        families = [GaugeMetricFamily(f"mixroute_tenant_{name}", doc, labels=["tenant", "period"]) for name, doc in (
            ("budget_usd", "A tenant's budget for its period (USD)."),
            ("spent_usd", "What the store recorded the tenant spending this period (USD)."),
            ("budget_left_usd", "The tenant's budget minus its spend this period, at least 0 (USD)."))]
        for tenant, spend in budgets:
            for fam, value in zip(families, (spend.budget_usd, spend.spent_usd, spend.left_usd)):
                fam.add_metric([tenant, spend.period], value)
        yield from families

    def _feedback_counts(self, engine) -> list[tuple[str, str, int]] | None:
        from gateway.dashboard.queries import feedback_verdicts  # dashboard owns the store queries

        at, cached = self._feedback
        if time.monotonic() - at < FEEDBACK_CACHE_S:
            return cached
        counts = feedback_verdicts(engine) if engine is not None else None
        self._feedback = (time.monotonic(), counts)
        return counts


def _runaway_families(watch) -> Iterator:
    """Spend rate, baseline and fired state per watched tenant and route, and the events."""
    labels = ["scope", "name"]
    rate = GaugeMetricFamily("mixroute_spend_rate_usd_per_minute", "Spend over the runaway check's short "
                             "window (USD per minute).", labels=labels)
    base = GaugeMetricFamily("mixroute_spend_baseline_usd_per_minute", "EWMA baseline of the spend rate "
                             "(USD per minute).", labels=labels)
    active = GaugeMetricFamily("mixroute_runaway_active", "1 while a tenant's or route's spend rate is over "
                               "the runaway threshold (or within its hold time).", labels=labels)
    for scope, name, r, b, on in watch.rates():
        rate.add_metric([scope, name], r)
        if b is not None:
            base.add_metric([scope, name], b)
        active.add_metric([scope, name], 1.0 if on else 0.0)
    events = CounterMetricFamily("mixroute_runaway_events", "Runaway spend events by action (alert, throttle, "
                                 "clear).", labels=["scope", "name", "action"])
    for (scope, name, action), n in sorted(watch.fired.items()):
        events.add_metric([scope, name, action], n)
    yield from (rate, base, active, events)


def _journal_bytes(journal) -> int:
    total = 0
    for path in (journal.path, journal.replaying):
        try:
            total += Path(path).stat().st_size
        except OSError:
            pass
    return total
