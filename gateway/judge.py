"""The judge: a model that grades a sampled share of answers, off the request path.

With ``learning.judge`` in the policy (:class:`router.policy.learning_config.JudgeConfig`),
each answered request is offered to the judge (:meth:`Judge.offer`): with probability
``sample`` it joins a bounded queue (a full queue drops it, counted), and a few worker
tasks grade the queue in the background. The client's request never waits for a grade and
never fails because of one.

A grade is one chat call to the judge's backend with the rubric, the prompt and the answer,
asking for ``SCORE: x`` with ``x`` in [0, 1] (:func:`parse_score`). The call is recorded
like any other request: a decision row (route :data:`ROUTE`, reason ``judge``, pinned, no
tenant) and an outcome row with its tokens and cost, so the dashboard's spend, log exports
and ``mixroute_cost_usd_total`` show the judge's spend beside the traffic's. Its score is
stored as a feedback row with source ``judge`` on the graded request, which the learning
loop turns into an observation with source ``judge`` (:mod:`gateway.store.observations`);
``POST /v1/feedback`` refuses that source, so no client can pass for the judge.

Money: the judge spends at most ``max_usd_per_day`` per UTC day. Before each call its
worst-case cost (the prompt's estimated tokens and ``max_tokens`` of output at the
backend's prices) is added to the day's spend so far; over the cap, the grade is skipped
and counted. The day's spend is the store's record of ``(judge)`` outcomes since UTC
midnight (every replica's, re-read every :data:`RESEED_S` seconds) plus what this replica
spent since that read.

Privacy: a request that matched a ``route_to``, ``allow_backends`` or ``require_tags`` rule
which the judge's backend does not satisfy is not graded (:func:`allowed`): a rule that
keeps prompts with PII on self-hosted models, or a tenant's allow list, binds the judge too.

Results (``mixroute_judge_total{result}``): ``graded``, ``unparsed`` (the judge answered
without a score in [0, 1]; the call is still paid), ``error`` (the backend failed: one log
line, at most one per :data:`LOG_EVERY_S`), ``over_cap`` (one log line per UTC day), ``not_allowed`` (a rule keeps the prompt from the judge), ``dropped`` (queue full).
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

import sqlalchemy as sa
from sqlalchemy import Engine

from backends.call import CallReport
from backends.errors import BackendError
from backends.openai_shapes import estimate_tokens, prompt_text
from backends.pricing import cost_usd
from gateway.dispatch import call_cost
from gateway.runtime import PolicyHolder
from gateway.store.feedback import FeedbackRecord
from gateway.store.models import Decision, Outcome
from router.policy.learning_config import JudgeConfig
from router.records import DecisionRecord, OutcomeRecord

log = logging.getLogger("mixroute.judge")

#: The route name of the judge's own calls in decisions, outcomes and metrics (no policy
#: route can have it: route names cannot contain parentheses).
ROUTE = "(judge)"
#: Answers waiting to be graded; beyond it an offered answer is dropped (counted).
MAX_PENDING = 256
#: Grades run at once.
WORKERS = 2
#: Characters of the prompt and of the answer sent to the judge (each; the rest is cut,
#: which bounds a grade's cost whatever the request's size).
MAX_CHARS = 16_000
#: Seconds a grade may take before it counts as an error.
TIMEOUT_S = 120.0
#: Seconds between two reads of the day's judge spend from the store.
RESEED_S = 60.0
#: Seconds between two log lines about a failing judge backend.
LOG_EVERY_S = 60.0

INSTRUCTIONS = ("You grade one answer of an AI assistant. Rubric: {rubric}\n\nReply with one line "
                "'SCORE: x' where x is a number from 0 (useless) to 1 (excellent), and nothing else.")

_SCORE = re.compile(r"score\s*[:=]?\s*\**\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+))", re.IGNORECASE)
_NUMBER = re.compile(r"^\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+))\s*$")


def parse_score(text: str) -> float | None:
    """The score in [0, 1] of a judge's answer: the number after the last ``SCORE`` (``SCORE:
    0.8``, ``score = 1``, ``**Score:** .5``), or an answer that is just a number; ``None``
    when there is none or it lies outside [0, 1]."""
    found = _SCORE.findall(text or "")
    value = found[-1] if found else (m.group(1) if (m := _NUMBER.match(text or "")) else None)
    if value is None:
        return None
    score = float(value)
    return score if 0.0 <= score <= 1.0 else None


@dataclass(frozen=True)
class Answered:
    """An answered request offered to the judge (the body as sent, the answer's text)."""

    request_id: str
    tenant: str | None
    endpoint: str
    body: dict
    answer: str
    rules: tuple[str, ...] = ()  # the decision's rule notes (signals.rules)


class DailySpend:
    """The judge's USD spend in the current UTC day (see the module docstring).

    Args:
        engine: the store's engine (``None``: this replica's own spend only).
    """

    def __init__(self, engine: Engine | None) -> None:
        self.engine = engine
        self.day: str | None = None  # the UTC day counted (YYYY-MM-DD)
        self._base = 0.0  # the store's figure at the last read
        self._since = 0.0  # spent here since that read
        self._read_at = float("-inf")

    def _stored(self, midnight: datetime) -> float:
        q = (sa.select(sa.func.coalesce(sa.func.sum(Outcome.cost_usd), 0.0))
             .select_from(Outcome).join(Decision, Decision.request_id == Outcome.request_id)
             .where(Decision.route == ROUTE, Decision.created_at >= midnight))
        with self.engine.connect() as conn:
            return float(conn.execute(q).scalar_one())

    def _roll(self) -> datetime:
        """Now (UTC); at a new UTC day, forget the last day's figures."""
        now = datetime.now(timezone.utc)
        day = now.strftime("%Y-%m-%d")
        if day != self.day:
            self.day, self._base, self._since, self._read_at = day, 0.0, 0.0, float("-inf")
        return now

    async def today(self) -> float:
        """USD spent today (the store's figure is re-read at most every :data:`RESEED_S`)."""
        now = self._roll()
        if self.engine is not None and time.monotonic() - self._read_at >= RESEED_S:
            try:
                stored = await asyncio.to_thread(self._stored, now.replace(hour=0, minute=0, second=0, microsecond=0))
            except sa.exc.SQLAlchemyError as exc:  # keep counting on what this replica knows
                log.warning("judge: cannot read today's judge spend from the store (%s)", type(exc).__name__)
            else:
                # Rows this replica wrote since the last read are in the store now; those still
                # queued are not, so keep the larger figure.
                self._base, self._since = max(stored, self._base + self._since), 0.0
            self._read_at = time.monotonic()
        return self._base + self._since

    def add(self, usd: float) -> None:
        self._roll()
        self._since += usd


class Judge:
    """The sampling, the queue and the workers of one gateway (see the module docstring).

    Args:
        holder: the policy holder (its current policy's ``learning.judge`` and backends).
        store: the store (:meth:`record_decision`, :meth:`record_outcome`, :meth:`record_feedback`).
        metrics: the app's :class:`gateway.observability.metrics.Metrics` (``None``: not counted).
        seed: the sampling generator's seed (``None``: from the system).
    """

    def __init__(self, holder: PolicyHolder, store, metrics=None, seed: int | None = None) -> None:
        self.holder, self.store, self.metrics = holder, store, metrics
        self.spend = DailySpend(getattr(store, "engine", None))
        self._rng = random.Random(seed)
        self._queue: asyncio.Queue[Answered] = asyncio.Queue(MAX_PENDING)
        self._workers: list[asyncio.Task] = []
        self._logged_at = float("-inf")
        self._quiet = 0  # failures not logged since the last line
        self._capped_on: str | None = None  # the UTC day the cap was last logged

    def config(self) -> JudgeConfig | None:
        runtime = self.holder.current
        learning = runtime.loaded.policy.learning if runtime is not None else None
        return learning.judge if learning is not None else None

    def start(self) -> None:
        self._workers = [asyncio.create_task(self._work(), name=f"mixroute-judge-{i}") for i in range(WORKERS)]

    async def aclose(self) -> None:
        for task in self._workers:
            task.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)

    def _count(self, result: str, usd: float = 0.0) -> None:
        if self.metrics is not None:
            self.metrics.child(self.metrics.judge, result).inc()
            if usd:
                self.metrics.judge_cost.inc(usd)

    def offer(self, record: DecisionRecord, endpoint: str, body: dict, answer: Callable[[], str]) -> None:
        """Offer an answered request (called on the request path: a draw and a queue put;
        ``answer`` gives the answer's text, read only when the request is drawn)."""
        config = self.config()
        if config is None or self._rng.random() >= config.sample:
            return
        text = answer()
        if not text:  # nothing to grade (a tool call)
            return
        rules = tuple(n for n in record.signals.get("rules") or () if isinstance(n, str))
        try:
            self._queue.put_nowait(Answered(record.request_id, record.tenant, endpoint, body, text, rules))
        except asyncio.QueueFull:
            self._count("dropped")

    async def _work(self) -> None:
        while True:
            item = await self._queue.get()
            try:
                await self.grade(item)
            except Exception:  # a bug must not stop the worker; the answer stays ungraded
                log.exception("judge: grading %s failed unexpectedly", item.request_id)
                self._count("error")

    async def grade(self, item: Answered) -> float | None:
        """Grade one answer (see the module docstring); its score, or ``None``."""
        config, runtime = self.config(), self.holder.current
        if config is None or runtime is None:
            return None
        backend = runtime.backends.get(config.backend)
        if backend is None:
            return None
        if not allowed(runtime.loaded.policy, config.backend, item.rules):
            self._count("not_allowed")
            return None
        user = (f"Request:\n{prompt_text(item.endpoint, item.body)[:MAX_CHARS]}\n\n"
                f"Answer:\n{item.answer[:MAX_CHARS]}")
        system = INSTRUCTIONS.format(rubric=config.rubric)
        body = {"model": backend.model, "messages": [{"role": "system", "content": system},
                                                     {"role": "user", "content": user}],
                "max_tokens": config.max_tokens, "temperature": 0}
        pricing = runtime.router.pricing.get(config.backend)
        prompt_tokens = estimate_tokens(system + user)
        worst = cost_usd(pricing, prompt_tokens, config.max_tokens) if pricing is not None else 0.0
        spent = await self.spend.today()
        if spent + worst > config.max_usd_per_day:
            self._count("over_cap")
            if self._capped_on != self.spend.day:  # one line per UTC day
                self._capped_on = self.spend.day
                log.warning("judge: daily cap reached: %.4f USD spent today, max_usd_per_day %.4f, a grade may cost "
                            "%.4f; answers stay ungraded until UTC midnight", spent, config.max_usd_per_day, worst)
            return None
        record = DecisionRecord(request_id=f"judge-{uuid.uuid4().hex}", route=ROUTE, policy_hash=runtime.loaded.hash,
                                chosen=config.backend, reason="judge", candidates=[], pinned=True,
                                signals={"judged": item.request_id})
        self.store.record_decision(record)
        report, started = CallReport(), time.perf_counter()
        # Counted like a routed call: a reload drains it before closing the backend, and the
        # router sees the load it puts on a backend that also serves traffic.
        call, live = backend.in_flight.begin(), runtime.router.live
        live.started(config.backend)
        try:
            resp = await asyncio.wait_for(backend.send("chat", body, report=report), TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001  # down, slow or broken: counted, one line, never raised
            live.finished(config.backend, ttft_s=None, latency_s=None)
            code = exc.code if isinstance(exc, BackendError) else ("timeout" if isinstance(exc, TimeoutError)
                                                                   else type(exc).__name__)
            self._finish(record, backend, "error", time.perf_counter() - started, error_code=code)
            self._failed(config.backend, code)
            return None
        else:
            elapsed = time.perf_counter() - started
            live.finished(config.backend, ttft_s=elapsed, latency_s=elapsed)
        finally:
            call.end()
        usage = resp.get("usage") or {}
        text = _answer(resp)
        if not usage:  # count it ourselves, as dispatch does for an upstream without usage
            usage = {"prompt_tokens": prompt_tokens, "completion_tokens": estimate_tokens(text)}
        usd = call_cost(runtime, config.backend, usage, report.cost_usd)
        self.spend.add(usd)
        self._finish(record, backend, "ok", time.perf_counter() - started, usage=usage, usd=usd,
                     estimated=not resp.get("usage"))
        score = parse_score(text)
        self._count("graded" if score is not None else "unparsed", usd)
        if score is not None:
            self.store.record_feedback(FeedbackRecord(
                request_id=item.request_id, score=score, source="judge", tenant=item.tenant,
                id=f"{item.request_id}/judge", comment=f"graded by {config.backend} in {record.request_id}"))
        return score

    def _finish(self, record: DecisionRecord, backend, status: str, latency: float, *, usage: dict | None = None,
                usd: float = 0.0, error_code: str | None = None, estimated: bool = False) -> None:
        usage = usage or {}
        outcome = OutcomeRecord(
            request_id=record.request_id, backend=backend.name, model=backend.model, status=status,
            http_status=200 if status == "ok" else 502, error_code=error_code, ttft_s=latency if status == "ok" else None,
            latency_s=latency, tokens_in=int(usage.get("prompt_tokens") or 0),
            tokens_out=int(usage.get("completion_tokens") or 0),
            tokens_cached=int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0),
            cost_usd=usd, usage_estimated=estimated)
        self.store.record_outcome(outcome)
        if self.metrics is not None:
            try:
                self.metrics.observe_outcome(record, outcome)
            except Exception:  # metrics must never stop a grade
                log.exception("recording metrics of a judge call failed")
        if status != "ok":
            self._count("error")

    def _failed(self, backend: str, code: str) -> None:
        now = time.monotonic()
        if now - self._logged_at < LOG_EVERY_S:
            self._quiet += 1
            return
        more = f" ({self._quiet} more since the last line)" if self._quiet else ""
        log.warning("judge: backend %s failed (%s); the answer stays ungraded%s", backend, code, more)
        self._logged_at, self._quiet = now, 0


def allowed(policy, backend: str, notes: tuple[str, ...]) -> bool:
    """Whether the rules a request matched (its decision's notes, ``<rule name>: ...`` or
    the rule name for a pinned request) allow ``backend``: a prompt that a ``route_to``,
    ``allow_backends`` or ``require_tags`` rule kept away from the judge's backend (PII kept
    on self-hosted models, a tenant's allow list) is never sent to it."""
    config = policy.backend(backend)
    for rule in policy.rules:
        if not any(n == rule.name or n.startswith(rule.name + ":") or n.startswith(rule.name + " (")
                   for n in notes):
            continue
        if (rule.route_to and rule.route_to != backend
                or rule.allow_backends and backend not in rule.allow_backends
                or rule.require_tags and not set(rule.require_tags) <= set(config.tags)):
            return False
    return True


def _answer(resp: dict) -> str:
    choices = resp.get("choices") or [{}]
    message = choices[0].get("message") or {}
    content = message.get("content")
    return content if isinstance(content, str) else ""
