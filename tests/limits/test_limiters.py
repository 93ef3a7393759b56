"""The limiter contract, run against the in-process limiter and a real Redis server."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from gateway.limits.base import (BudgetExceeded, LimiterUnavailable, Limits, RateLimitExceeded, ratelimit_headers,
                                 window_now)



def _subject() -> str:
    _, left = window_now()
    if left < 3:  # the counting windows are fixed minutes: don't straddle a boundary
        time.sleep(left + 0.05)
    return f"k-{uuid.uuid4().hex[:8]}"


async def test_rpm_is_exact_under_concurrency(limiter):
    limits = Limits(subject=_subject(), rpm=25)
    results = await asyncio.gather(*(limiter.admit(limits, 10, 0.0) for _ in range(100)), return_exceptions=True)
    ok = [r for r in results if not isinstance(r, Exception)]
    rejected = [r for r in results if isinstance(r, RateLimitExceeded)]
    assert len(ok) == 25 and len(rejected) == 75
    assert all(0 < r.retry_after_s <= 60 for r in rejected)
    assert rejected[0].to_envelope()["error"]["code"] == "rate_limit_exceeded"


async def test_tpm_admits_while_below(limiter):
    limits = Limits(subject=_subject(), tpm=100)
    for _ in range(4):
        await limiter.admit(limits, 30, 0.0)  # 0, 30, 60, 90 used before each: all below 100
    with pytest.raises(RateLimitExceeded):
        await limiter.admit(limits, 30, 0.0)


async def test_rate_limit_headers_count_down_within_the_window(limiter):
    """Each admission reports the window's counts after itself (OpenAI's x-ratelimit-*
    headers), concurrent admissions get distinct request counts, and the 429 of a reached
    limit says 0 remaining."""
    limits = Limits(subject=_subject(), rpm=5, tpm=1000)
    first = (await limiter.admit(limits, 100, 0.0)).headers()
    assert first["x-ratelimit-limit-requests"] == "5" and first["x-ratelimit-remaining-requests"] == "4"
    assert first["x-ratelimit-limit-tokens"] == "1000" and first["x-ratelimit-remaining-tokens"] == "900"
    assert first["x-ratelimit-reset-requests"] == first["x-ratelimit-reset-tokens"]
    assert first["x-ratelimit-reset-requests"].endswith("s")
    rest = await asyncio.gather(*(limiter.admit(limits, 10, 0.0) for _ in range(4)))
    assert sorted(int(r.headers()["x-ratelimit-remaining-requests"]) for r in rest) == [0, 1, 2, 3]
    assert sorted(int(r.headers()["x-ratelimit-remaining-tokens"]) for r in rest) == [860, 870, 880, 890]
    with pytest.raises(RateLimitExceeded) as refused:
        await limiter.admit(limits, 10, 0.0)
    assert refused.value.headers["x-ratelimit-remaining-requests"] == "0"
    assert refused.value.headers["x-ratelimit-remaining-tokens"] == "860"
    only_budget = await limiter.admit(Limits(subject=_subject(), budget_usd=1.0), 10, 0.001)
    assert only_budget.headers() == {}


def test_rate_limit_header_values():
    both = ratelimit_headers(Limits(subject="k", rpm=10, tpm=50), 12, 20, 0.1234)
    assert both == {"x-ratelimit-limit-requests": "10", "x-ratelimit-remaining-requests": "0",
                    "x-ratelimit-reset-requests": "123ms", "x-ratelimit-limit-tokens": "50",
                    "x-ratelimit-remaining-tokens": "30", "x-ratelimit-reset-tokens": "123ms"}
    assert ratelimit_headers(Limits(subject="k", tpm=5), 1, 1, 7.5) == {
        "x-ratelimit-limit-tokens": "5", "x-ratelimit-remaining-tokens": "4", "x-ratelimit-reset-tokens": "7.5s"}
    assert ratelimit_headers(Limits(subject="k", rpm=1), 0, 0, 360)["x-ratelimit-reset-requests"] == "6m0s"
    assert ratelimit_headers(Limits(subject="k", rpm=1), 0, 0, 59.9996)["x-ratelimit-reset-requests"] == "60s"
    assert ratelimit_headers(Limits(subject="k", budget_usd=1.0), 3, 3, 1.0) == {}


async def test_settle_corrects_tokens(limiter):
    limits = Limits(subject=_subject(), tpm=100)
    res = await limiter.admit(limits, 90, 0.0)
    await limiter.settle(res, 10, 0.0)  # the request really used 10 tokens
    for _ in range(3):
        await limiter.admit(limits, 30, 0.0)


async def test_budget_overspend_bounded_by_one_request(limiter):
    budget, est, real = 0.002, 0.0003, 0.00025
    limits = Limits(subject=_subject(), budget_usd=budget, period="day")

    async def one():
        res = await limiter.admit(limits, 10, est)
        await asyncio.sleep(0.001)
        await limiter.settle(res, 10, real)
        return res

    results = await asyncio.gather(*(one() for _ in range(200)), return_exceptions=True)
    ok = [r for r in results if not isinstance(r, Exception)]
    over = [r for r in results if isinstance(r, BudgetExceeded)]
    assert ok and over and len(ok) + len(over) == 200
    assert over[0].to_envelope()["error"] == {
        "message": over[0].message, "type": "insufficient_quota", "param": None, "code": "budget_exceeded"}
    spent = await limiter.spent_usd(limits)
    assert spent == pytest.approx(len(ok) * real)
    assert spent <= budget + est


async def test_unreachable_redis_raises_unavailable():
    pytest.importorskip("redis")
    from gateway.limits.redis import RedisLimiter

    lim = RedisLimiter("redis://:secret@127.0.0.1:1/3", timeout_s=0.2)
    with pytest.raises(LimiterUnavailable):
        await lim.admit(Limits(subject="x", rpm=1), 1, 0.0)
    problem = await lim.check()  # what the gateway logs at start
    assert problem and "Error" in problem and "secret" not in problem + lim.where
    assert lim.where == "127.0.0.1:1/3"
    await lim.aclose()


async def test_reachable_redis_checks_clean(limiter):
    assert await limiter.check() is None


async def test_budget_exceeded_message_uses_fixed_notation(limiter):
    limits = Limits(subject=f"k-{uuid.uuid4().hex[:8]}", budget_usd=0.00002)
    await limiter.admit(limits, 10, 0.00003)
    with pytest.raises(BudgetExceeded) as info:
        await limiter.admit(limits, 10, 0.0)
    assert "Budget of 0.000020 USD per month is spent" in info.value.message
    assert "e-05" not in info.value.message


async def test_redis_timeout_setting_reaches_the_limiter():
    """MIXROUTE_REDIS_TIMEOUT_S (default 3 s: a busy event loop's delay counts against it)."""
    from gateway.app import make_limiter
    from gateway.settings import Settings

    for settings, expected in ((Settings(redis_url="redis://127.0.0.1:6379/0"), 3.0),
                               (Settings(redis_url="redis://127.0.0.1:6379/0", redis_timeout_s=0.5), 0.5)):
        lim = make_limiter(settings)
        kw = lim._redis.connection_pool.connection_kwargs
        assert kw["socket_timeout"] == kw["socket_connect_timeout"] == expected
        await lim.aclose()


async def test_a_budget_starts_from_the_recorded_spend_once_per_period(monkeypatch):
    """The in-process counter of a budget starts from what the store recorded; a store that
    cannot be read leaves it at 0 and is asked again only after SEED_RETRY_S."""
    import gateway.limits.base as base
    from gateway.limits.memory import MemoryLimiter

    limiter = MemoryLimiter()
    calls = []

    def recorded(tenant, since):
        calls.append((tenant, since))
        if len(calls) == 1:
            raise OSError("database down")
        return 0.004

    limiter.recorded_spend = recorded
    limits = Limits(subject="tenant:acme", budget_usd=0.005, period="month")
    await limiter.seed_budget(limits)  # unreadable: counts from 0 for now
    assert await limiter.spent_usd(limits) == 0 and len(calls) == 1
    await limiter.seed_budget(limits)  # not asked again at once
    assert len(calls) == 1
    monkeypatch.setattr(base, "SEED_RETRY_S", 0.0)
    await limiter.seed_budget(limits)
    assert calls[1][0] == "tenant:acme" and calls[1][1] == base.period_start("month")
    assert await limiter.spent_usd(limits) == pytest.approx(0.004)
    await limiter.seed_budget(limits)  # seeded: once per period
    assert len(calls) == 2
    await limiter.admit(limits, 10, 0.0015)  # 0.004 spent < 0.005: admitted
    with pytest.raises(BudgetExceeded):
        await limiter.admit(limits, 10, 0.0015)  # 0.004 + 0.0015 reserved: full
    await limiter.seed_budget(Limits(subject="key1", rpm=10))  # no budget: nothing to seed
    assert len(calls) == 2
    await limiter.seed_budget(Limits(subject="key1", budget_usd=0.005, period="day"))
    assert calls[2][0] == "key1" and calls[2][1] == base.period_start("day")
