"""In-process limiter: the same rules as the Redis one, for a single gateway process."""

from __future__ import annotations

import asyncio
from collections import defaultdict

from gateway.limits.base import (NANO, BudgetExceeded, Limiter, Limits, RateLimitExceeded, Reservation, period_id,
                                 period_retry_after, ratelimit_headers, to_nano, window_now)


class MemoryLimiter(Limiter):
    """Counters in a dict under one asyncio lock (old windows are dropped as time moves)."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = asyncio.Lock()
        self._windows: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0])  # (requests, tokens)
        self._spend: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])    # (spent, reserved) nano-USD

    async def admit(self, limits: Limits, tokens: int, cost_usd: float) -> Reservation:
        cost = to_nano(cost_usd)
        async with self._lock:
            # The clock is read under the lock, so a request that waited for it is counted
            # in the window (and budget period) it was admitted in.
            window, left = window_now()
            pid = period_id(limits.period)
            self._gc(window)
            w = self._windows[(limits.subject, window)]
            if limits.rpm is not None and w[0] >= limits.rpm:
                raise RateLimitExceeded(f"Rate limit reached: {limits.rpm} requests per minute", retry_after_s=left,
                                        headers=ratelimit_headers(limits, w[0], w[1], left))
            if limits.tpm is not None and w[1] >= limits.tpm:
                raise RateLimitExceeded(f"Rate limit reached: {limits.tpm} tokens per minute", retry_after_s=left,
                                        headers=ratelimit_headers(limits, w[0], w[1], left))
            s = self._spend[(limits.subject, pid)]
            if limits.budget_usd is not None and s[0] + s[1] >= to_nano(limits.budget_usd):
                raise BudgetExceeded(
                    f"Budget of {limits.budget_usd:.6f} USD {limits.per_period} is spent ({s[0] / NANO:.6f} USD used)",
                    retry_after_s=period_retry_after(limits.period))
            w[0] += 1
            w[1] += tokens
            s[1] += cost
            return Reservation(limits, window, pid, tokens, cost, w[0], w[1], left)

    async def _seed(self, limits: Limits, pid: str, spent_usd: float) -> None:
        async with self._lock:
            s = self._spend[(limits.subject, pid)]
            s[0] = max(s[0], to_nano(spent_usd))  # the store lags this process's own settlements

    async def settle(self, reservation: Reservation, tokens: int, cost_usd: float, at: float | None = None) -> None:
        async with self._lock:
            key = (reservation.limits.subject, reservation.window)
            if key in self._windows:
                self._windows[key][1] += tokens - reservation.tokens
            s = self._spend[(reservation.limits.subject, reservation.period_id)]
            s[1] -= reservation.cost_nano
            s[0] += to_nano(cost_usd)

    async def spent_usd(self, limits: Limits) -> float:
        return self._spend[(limits.subject, period_id(limits.period))][0] / NANO

    def _gc(self, window: int) -> None:
        for key in [k for k in self._windows if k[1] < window - 1]:
            del self._windows[key]
