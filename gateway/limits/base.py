"""The limiter interface and its arithmetic.

Windows: fixed 60-second windows (``floor(unix_time / 60)``). A request is admitted while
the window's count is below the limit, so a limit is exact to within one request.

Budgets: spend is reserved before dispatch (the chosen candidate's cost ceiling when the
request sets ``max_tokens``, else its expected cost) and settled with the real cost. A
request is admitted while ``spent + reserved < budget``, so concurrent requests overspend
by at most one request's reservation when reservations are ceilings. Amounts are kept as
integer nano-USD so Redis can add them atomically.

The store is the source of truth for spend. A budget's counter is reconciled with the
spend the store recorded for the key or tenant in the period (:meth:`Limiter.seed_budget`:
the counter becomes the larger of the two) when the process first meets it, every
:data:`RECONCILE_S` after, after the limiter's backing store was unreachable (spend
admitted meanwhile, fail-open, is in the store only), and when the counter is gone (a
Redis restart). Reservations expire (:data:`RESERVATION_TTL_S`), so one whose settlement
never arrived (a crashed process, a hang) stops holding budget.

Errors::

    RateLimitExceeded  429 rate_limit_error    rate_limit_exceeded  (retry-after: window end)
    BudgetExceeded     429 insufficient_quota  budget_exceeded      (retry-after: period end)

Headers: every answer to a key with ``rpm`` or ``tpm`` carries OpenAI's rate-limit headers
(:func:`ratelimit_headers`), the 429 of a reached limit included, so clients can pace
themselves before they are refused.
"""

from __future__ import annotations

import asyncio
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

from router.errors import RequestRejected

WINDOW_S = 60
NANO = 1_000_000_000
#: A tenant's budget is counted under the limits subject ``TENANT_SUBJECT + <tenant name>``
#: (a key's under its key id).
TENANT_SUBJECT = "tenant:"
log = logging.getLogger("mixroute.limits")


class RateLimitExceeded(RequestRejected):
    """A request or token limit of the current window is reached; ``headers`` are the
    window's :func:`ratelimit_headers` (sent with the 429)."""

    code = "rate_limit_exceeded"

    def __init__(self, message: str, *, retry_after_s: float, headers: dict[str, str] | None = None, **kw):
        super().__init__(message, retry_after_s=retry_after_s, **kw)
        self.headers = headers or {}


class BudgetExceeded(RequestRejected):
    type = "insufficient_quota"
    code = "budget_exceeded"


class LimiterUnavailable(Exception):
    """The shared limiter state cannot be reached (Redis down)."""


@dataclass(frozen=True)
class Limits:
    """What one key may use. ``None`` means unlimited.

    Attributes:
        subject: the key id (limits and spend are per key).
        rpm, tpm: requests and tokens per minute.
        budget_usd: USD per ``period`` (``day``, ``month`` or ``total``).
    """

    subject: str
    rpm: int | None = None
    tpm: int | None = None
    budget_usd: float | None = None
    period: str = "month"

    @property
    def per_period(self) -> str:
        """``per day``, ``per month`` or ``in total``, for messages."""
        return "in total" if self.period == "total" else f"per {self.period}"


@dataclass
class Reservation:
    """What :meth:`Limiter.admit` reserved, to settle later, and the window's counts once
    this request was counted (``window_requests``, ``window_tokens``; ``reset_s``: seconds
    left in the window), for :meth:`headers`; ``member``: the reservation's id in a shared
    limiter (Redis), so that settling it is idempotent; ``gen``: the generation of the budget
    counter it was admitted under (Redis: a counter rebuilt after a loss has a new one)."""

    limits: Limits
    window: int
    period_id: str
    tokens: int
    cost_nano: int
    window_requests: int = 0
    window_tokens: int = 0
    reset_s: float = 0.0
    member: str = ""
    gen: str = ""

    def headers(self) -> dict[str, str]:
        """This window's :func:`ratelimit_headers` (empty when the limits set no rpm/tpm)."""
        return ratelimit_headers(self.limits, self.window_requests, self.window_tokens, self.reset_s)


def ratelimit_headers(limits: Limits, requests: int, tokens: int, reset_s: float) -> dict[str, str]:
    """OpenAI's rate-limit response headers for ``limits`` after ``requests`` requests and
    ``tokens`` tokens were counted in the current window (``reset_s`` seconds left):
    ``x-ratelimit-limit-requests``, ``x-ratelimit-remaining-requests`` and
    ``x-ratelimit-reset-requests`` when ``rpm`` is set, the same three ``-tokens`` headers
    when ``tpm`` is set (names and the duration format, e.g. ``1s``, ``6m0s``, ``120ms``, as
    in the OpenAI API's rate-limit guide). Tokens are the window's reserved expected tokens,
    replaced by the real ones as answers settle. Empty when neither limit is set."""
    headers: dict[str, str] = {}
    reset = _duration(reset_s)
    for kind, limit, used in (("requests", limits.rpm, requests), ("tokens", limits.tpm, tokens)):
        if limit is not None:
            headers[f"x-ratelimit-limit-{kind}"] = str(limit)
            headers[f"x-ratelimit-remaining-{kind}"] = str(max(0, limit - used))
            headers[f"x-ratelimit-reset-{kind}"] = reset
    return headers


def _duration(seconds: float) -> str:
    """``0.12`` -> ``120ms``, ``7.5`` -> ``7.5s``, ``360`` -> ``6m0s`` (the OpenAI headers' format)."""
    if seconds < 1:
        return f"{max(0, round(seconds * 1000))}ms"
    minutes, rest = divmod(seconds, 60)
    text = f"{rest:.3f}".rstrip("0").rstrip(".") + "s"
    return f"{int(minutes)}m{text}" if minutes else text


def to_nano(usd: float) -> int:
    return int(round(usd * NANO))


def period_id(period: str, now: float | None = None) -> str:
    t = datetime.fromtimestamp(now if now is not None else time.time(), timezone.utc)
    return {"day": t.strftime("%Y%m%d"), "month": t.strftime("%Y%m")}.get(period, "total")


def period_retry_after(period: str, now: float | None = None) -> float:
    """Seconds until the budget period resets (a day for ``total``, which never resets)."""
    now = now if now is not None else time.time()
    t = datetime.fromtimestamp(now, timezone.utc)
    if period == "day":
        return 86400 - (now % 86400)
    if period == "month":
        nxt = datetime(t.year + (t.month == 12), t.month % 12 + 1, 1, tzinfo=timezone.utc)
        return nxt.timestamp() - now
    return 86400.0


def period_start(period: str, now: float | None = None) -> datetime:
    """UTC start of the budget period holding ``now`` (``total``: the epoch)."""
    t = datetime.fromtimestamp(now if now is not None else time.time(), timezone.utc)
    if period == "day":
        return t.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "month":
        return t.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return datetime(1970, 1, 1, tzinfo=timezone.utc)


#: Seconds before a failed read of a budget's recorded spend is tried again.
SEED_RETRY_S = 30.0
#: Seconds between reconciliations of a budget's counter with the store's recorded spend
#: while nothing was lost (each is one aggregate query per budget and gateway process; the
#: reconciliations that matter follow events: a new counter, a Redis restart or outage).
RECONCILE_S = 300.0
#: Seconds after which a reservation that was never settled stops counting: longer than a
#: request can run (upstream timeouts), short enough that a lost settlement frees its budget.
RESERVATION_TTL_S = 900.0


class Limiter(ABC):
    """Admit-then-settle limiter; see the module docstring for the rules.

    Attributes:
        recorded_spend: ``(subject, since, before=None) -> USD`` the store recorded for a limits
            subject (a key id, or ``tenant:<name>``) for requests decided since ``since``
            (with ``before``: of outcomes recorded before it) (blocking; run in a thread), or
            ``None``: budget counters then start at 0 (:meth:`seed_budget`).
    """

    def __init__(self) -> None:
        self.recorded_spend: Callable[..., float] | None = None
        # (subject, period id) -> (monotonic time of the last reconciliation, whether the store failed)
        self._seeded: dict[tuple[str, str], tuple[float, bool]] = {}

    async def seed_budget(self, limits: Limits) -> None:
        """Reconcile a budget's counter for this period with the store's record of the key's
        or tenant's spend in it (the counter becomes the larger of the two; rows still
        queued in a writer are not in the store yet, so the counter is never lowered):
        when this process first meets it, then every :data:`RECONCILE_S`, and at once after
        :meth:`forget_seeds`. A store that cannot be read leaves the counter as it is, and
        is tried again after :data:`SEED_RETRY_S`.

        Raises:
            LimiterUnavailable: the shared state cannot be reached.
        """
        if limits.budget_usd is None:
            return
        last = self._seeded.get((limits.subject, period_id(limits.period)))
        if last is not None and time.monotonic() - last[0] < (SEED_RETRY_S if last[1] else RECONCILE_S):
            return
        await self.reconcile(limits)

    async def reconcile(self, limits: Limits) -> None:
        """Reconcile the counter of ``limits`` with the store now (see :meth:`seed_budget`)."""
        pid = period_id(limits.period)
        spent, failed = 0.0, False
        if self.recorded_spend is not None:
            try:
                spent = await asyncio.to_thread(self.recorded_spend, limits.subject, period_start(limits.period))
            except Exception as exc:  # the store is down: count from what the limiter sees
                failed = True
                log.warning("budget of %s: recorded spend unreadable (%s); counting from what this gateway sees "
                            "for now", limits.subject, type(exc).__name__)
        await self._seed(limits, pid, spent)
        self._seeded[(limits.subject, pid)] = (time.monotonic(), failed)

    def forget_seeds(self) -> None:
        """Reconcile every budget with the store at its next request (after an outage)."""
        self._seeded.clear()

    async def _seed(self, limits: Limits, pid: str, spent_usd: float) -> None:
        """Raise the period's spent amount to ``spent_usd`` if it is lower, and mark the
        counter as reconciled."""

    @abstractmethod
    async def admit(self, limits: Limits, tokens: int, cost_usd: float) -> Reservation:
        """Count one request with ``tokens`` expected tokens and ``cost_usd`` expected cost.

        Raises:
            RateLimitExceeded: rpm or tpm reached in this window.
            BudgetExceeded: the period's budget is spent (or fully reserved).
            LimiterUnavailable: the shared state cannot be reached.
        """

    @abstractmethod
    async def settle(self, reservation: Reservation, tokens: int, cost_usd: float, at: float | None = None) -> None:
        """Replace the reservation by the real ``tokens`` and ``cost_usd`` (USD) of the
        outcome recorded at ``at`` (unix seconds; default now)."""

    def count_unadmitted(self, limits: Limits, cost_usd: float, at: float | None = None) -> None:
        """Note spend admitted without the limiter (unreachable, policy ``open``) at ``at``:
        a shared limiter's counter rebuilt before the store has it must still count it
        (:mod:`gateway.limits.recent`). In process: nothing to do, the store has it at the
        next reconciliation."""

    @abstractmethod
    async def spent_usd(self, limits: Limits) -> float:
        """Settled spend of the current period in USD."""

    async def check(self) -> str | None:
        """Whether the limiter's backing store answers: ``None``, else why not (never raises)."""
        return None

    async def aclose(self) -> None:
        """Release connections."""


def window_now() -> tuple[int, float]:
    """``(window index, seconds left in it)``."""
    now = time.time()
    return int(now // WINDOW_S), WINDOW_S - (now % WINDOW_S)
