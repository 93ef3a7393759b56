"""The Redis limiter after losing state: reservations expire, settling is idempotent, and a
counter Redis lost is reconciled with the store before it admits anything (real Redis,
``MIXROUTE_TEST_REDIS_URL``, a prefix of its own)."""

from __future__ import annotations

import asyncio

import pytest

from gateway.limits.base import BudgetExceeded, Limits
from tests.conftest import redis_test_prefix
from tests.limits.conftest import REDIS_URL

pytestmark = pytest.mark.skipif(not REDIS_URL, reason="MIXROUTE_TEST_REDIS_URL is not set")


@pytest.fixture
async def make():
    from gateway.limits.redis import RedisLimiter

    made = []

    def _make(prefix: str | None = None, **kw):
        lim = RedisLimiter(REDIS_URL, prefix=prefix or redis_test_prefix(), timeout_s=5.0, **kw)
        made.append(lim)
        return lim

    yield _make
    for lim in made:
        await lim.aclose()


async def test_an_unsettled_reservation_expires(make) -> None:
    lim = make(reservation_ttl_s=0.2)
    limits = Limits(subject="k", budget_usd=0.008, period="total")
    await lim.admit(limits, 10, 0.008)  # never settled: its gateway died
    with pytest.raises(BudgetExceeded):
        await lim.admit(limits, 10, 0.008)
    await asyncio.sleep(0.3)
    await lim.admit(limits, 10, 0.008)  # the lost reservation no longer holds the budget


async def test_settling_twice_counts_once(make) -> None:
    lim = make()
    limits = Limits(subject="k", budget_usd=1.0, period="total")
    res = await lim.admit(limits, 10, 0.004)
    await lim.settle(res, 10, 0.003)
    await lim.settle(res, 10, 0.003)  # a retried settlement whose first try did reach Redis
    assert await lim.spent_usd(limits) == pytest.approx(0.003)
    raw = await lim._redis.hget(f"{lim.prefix}:s:k:total", "reserved")
    assert int(raw) == 0


async def test_a_counter_redis_lost_is_reconciled_with_the_store_first(make) -> None:
    lim = make()
    store = {"spent": 0.005}
    lim.recorded_spend = lambda subject, since: store["spent"]
    limits = Limits(subject="k", budget_usd=0.010, period="total")
    await lim.seed_budget(limits)
    res = await lim.admit(limits, 10, 0.0001)
    await lim.settle(res, 10, 0.0001)
    store["spent"] = 0.010  # what the store holds by now
    await lim._redis.delete(f"{lim.prefix}:s:k:total")  # Redis restarted empty
    await lim.seed_budget(limits)  # this process reconciled a moment ago: it does not know
    with pytest.raises(BudgetExceeded):  # ...but the counter lost its mark, so admit asks the store first
        await lim.admit(limits, 10, 0.0001)
    assert await lim.spent_usd(limits) == pytest.approx(0.010)


async def test_an_outage_makes_every_replica_reconcile(make) -> None:
    """One replica that lost Redis bumps the epoch when it is back; another replica that
    never saw the outage reconciles at its next request, picking up the fail-open spend."""
    a = make()
    b = make(prefix=a.prefix)  # two gateway replicas on one Redis
    store = {"spent": 0.002}
    a.recorded_spend = b.recorded_spend = lambda subject, since: store["spent"]
    limits = Limits(subject="k", budget_usd=0.010, period="total")
    for lim in (a, b):
        await lim.seed_budget(limits)
        await lim.settle(await lim.admit(limits, 10, 0.0), 10, 0.0)
    store["spent"] = 0.010  # admitted fail-open by replica a while it could not reach Redis
    a._stale = True
    await a._recover()
    await b.seed_budget(limits)
    await b.admit(limits, 10, 0.0)  # sees the new epoch: its next budget check asks the store
    await b.seed_budget(limits)
    with pytest.raises(BudgetExceeded):
        await b.admit(limits, 10, 0.0002)
