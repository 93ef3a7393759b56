"""The limiter interface and its arithmetic.

Windows: fixed 60-second windows (``floor(unix_time / 60)``). A request is admitted while
the window's count is below the limit, so a limit is exact to within one request.

Budgets: spend is reserved before dispatch from the expected cost and settled with the
real cost. A request is admitted while ``spent + reserved < budget``, so concurrent
requests overspend by at most one request's expected cost (when expected costs are upper
bounds, which the engine's estimate is unless ``max_tokens`` is absent and the answer is
longer than the expected output length). Amounts are kept as integer nano-USD so Redis
can add them atomically.

Errors::

    RateLimitExceeded  429 rate_limit_error    rate_limit_exceeded  (retry-after: window end)
    BudgetExceeded     429 insufficient_quota  budget_exceeded      (retry-after: period end)
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import datetime, timezone

from router.errors import RequestRejected

WINDOW_S = 60
NANO = 1_000_000_000


class RateLimitExceeded(RequestRejected):
    code = "rate_limit_exceeded"


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
    """What :meth:`Limiter.admit` reserved, to settle later."""

    limits: Limits
    window: int
    period_id: str
    tokens: int
    cost_nano: int


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


class Limiter(ABC):
    """Admit-then-settle limiter; see the module docstring for the rules."""

    @abstractmethod
    async def admit(self, limits: Limits, tokens: int, cost_usd: float) -> Reservation:
        """Count one request with ``tokens`` expected tokens and ``cost_usd`` expected cost.

        Raises:
            RateLimitExceeded: rpm or tpm reached in this window.
            BudgetExceeded: the period's budget is spent (or fully reserved).
            LimiterUnavailable: the shared state cannot be reached.
        """

    @abstractmethod
    async def settle(self, reservation: Reservation, tokens: int, cost_usd: float) -> None:
        """Replace the reservation by the real ``tokens`` and ``cost_usd`` (USD)."""

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
