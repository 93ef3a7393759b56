"""The Redis limiter after losing state: reservations expire, settling is idempotent, and a
counter Redis lost is reconciled with the store before it admits anything (real Redis,
``MIXROUTE_TEST_REDIS_URL``, a prefix of its own)."""

from __future__ import annotations

import asyncio
import time

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
    store = LaggingStore()
    store.add(0.005, written=True, at=time.time() - 600)
    lim.recorded_spend = store
    limits = Limits(subject="k", budget_usd=0.010, period="total")
    await lim.seed_budget(limits)
    await _spend(lim, limits, store, 0.0001, written=True)
    store.add(0.0049, written=True, at=time.time() - 300)  # spent through another gateway, long ago
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
    a.recorded_spend = b.recorded_spend = lambda subject, since, before=None: store["spent"]
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


class LaggingStore:
    """The store as a rebuild reads it: outcomes with their time, of which only those
    ``written`` are visible (the rest wait in a writer's queue or a journal)."""

    def __init__(self) -> None:
        self.rows: list[tuple[float, float, bool]] = []  # (unix time, USD, written)

    def add(self, usd: float, written: bool, at: float | None = None) -> float:
        at = time.time() if at is None else at
        self.rows.append((at, usd, written))
        return at

    def write_all(self) -> None:
        self.rows = [(at, usd, True) for at, usd, _ in self.rows]

    def __call__(self, subject: str, since, before=None) -> float:
        cut = before.timestamp() if before is not None else float("inf")
        return sum(usd for at, usd, written in self.rows if written and at < cut)


async def _spend(lim, limits: Limits, store: LaggingStore, usd: float, written: bool, at: float | None = None):
    at = store.add(usd, written, at)
    await lim.settle(await lim.admit(limits, 10, usd), 10, usd, at)


async def _wipe(lim) -> None:
    """Redis restarted empty (only this test's keys)."""
    keys = [k async for k in lim._redis.scan_iter(match=f"{lim.prefix}:*")]
    if keys:
        await lim._redis.delete(*keys)


async def test_a_counter_lost_while_the_store_lags_keeps_the_budget(make) -> None:
    """The store has an old part of the spend; the last settlements are still queued for it.
    Redis restarts empty: the rebuilt counter is the store's part plus what this gateway
    settled lately, so the budget stays spent (a counter rebuilt from the store alone let
    the lagging spend be spent again)."""
    lim = make()
    store = LaggingStore()
    lim.recorded_spend = store
    limits = Limits(subject="k", budget_usd=0.010, period="total")
    await lim.seed_budget(limits)
    await _spend(lim, limits, store, 0.004, written=True, at=time.time() - 600)  # long in the store
    for _ in range(3):
        await _spend(lim, limits, store, 0.002, written=False)  # queued in the writer
    await _wipe(lim)
    with pytest.raises(BudgetExceeded):
        await lim.admit(limits, 10, 0.0001)
    assert await lim.spent_usd(limits) == pytest.approx(0.010)
    store.write_all()  # the writer caught up: the next reconciliation does not count it twice
    lim.forget_seeds()
    await lim.seed_budget(limits)
    assert await lim.spent_usd(limits) == pytest.approx(0.010)


async def test_every_replica_adds_its_recent_spend_to_a_rebuilt_counter_once(make) -> None:
    a = make()
    b = make(prefix=a.prefix)
    store = LaggingStore()
    a.recorded_spend = b.recorded_spend = store
    limits = Limits(subject="k", budget_usd=0.020, period="total")
    await _spend(a, limits, store, 0.003, written=True, at=time.time() - 600)
    await _spend(a, limits, store, 0.004, written=False)
    await _spend(b, limits, store, 0.005, written=False)
    await _wipe(a)
    await _spend(a, limits, store, 0.001, written=False)  # a rebuilds: 0.003 + its 0.004, then 0.001
    assert await a.spent_usd(limits) == pytest.approx(0.008)
    await _spend(b, limits, store, 0.001, written=False)  # b meets the new counter: adds its 0.005 once
    assert await a.spent_usd(limits) == pytest.approx(0.014)
    await _spend(b, limits, store, 0.001, written=False)
    await _spend(a, limits, store, 0.001, written=False)
    assert await a.spent_usd(limits) == pytest.approx(0.016)
    store.write_all()
    for lim in (a, b):  # a reconciliation while replicas may still add theirs leaves it alone
        lim.forget_seeds()
        await lim.seed_budget(limits)
    assert await a.spent_usd(limits) == pytest.approx(0.016)


async def test_a_request_in_flight_across_a_restart_is_held_and_counted_once(make) -> None:
    """A reservation Redis lost with the counter is held again in the rebuilt one, so the
    budget it holds is not admitted twice; its settlement counts once, retried or not, and
    across a second restart."""
    lim = make()
    store = LaggingStore()
    lim.recorded_spend = store
    limits = Limits(subject="k", budget_usd=0.007, period="total")
    await _spend(lim, limits, store, 0.002, written=True, at=time.time() - 600)
    flying = await lim.admit(limits, 10, 0.005)  # admitted before the restart, settles after it
    await _wipe(lim)
    with pytest.raises(BudgetExceeded):  # rebuilt: 0.002 spent and the 0.005 in flight held again
        await lim.admit(limits, 10, 0.001)
    at = store.add(0.004, written=False)
    await lim.settle(flying, 10, 0.004, at)
    await lim.settle(flying, 10, 0.004, at)  # a retried settlement counts once
    assert await lim.spent_usd(limits) == pytest.approx(0.006)
    assert int(await lim._redis.hget(f"{lim.prefix}:s:k:total", "reserved")) == 0
    await _spend(lim, limits, store, 0.0005, written=False)
    await _wipe(lim)  # a second restart counts it once, from this gateway's recent spend
    await lim.seed_budget(limits)
    lim.forget_seeds()
    await lim.seed_budget(limits)
    assert await lim.spent_usd(limits) == pytest.approx(0.0065)


async def test_a_reservation_settled_outside_its_counter_counts_once(make) -> None:
    """Settled while its counter was gone (before the rebuild), or after a rebuild that did
    not hold it (another replica rebuilt it): counted once, and never held again."""
    a = make()
    b = make(prefix=a.prefix)
    store = LaggingStore()
    a.recorded_spend = b.recorded_spend = store
    limits = Limits(subject="k", budget_usd=1.0, period="total")
    await _spend(a, limits, store, 0.002, written=True, at=time.time() - 600)
    early, late = await a.admit(limits, 10, 0.003), await a.admit(limits, 10, 0.004)
    await _wipe(a)
    await a.settle(early, 10, 0.003, store.add(0.003, written=False))  # no counter yet: a's recent spend
    await _spend(b, limits, store, 0.001, written=False)  # b rebuilds: 0.002 (the store), then 0.001
    assert await a.spent_usd(limits) == pytest.approx(0.003)
    await a.settle(late, 10, 0.004, store.add(0.004, written=False))  # late: added to b's counter once
    await a.settle(late, 10, 0.004)
    assert await a.spent_usd(limits) == pytest.approx(0.007)
    await _spend(a, limits, store, 0.001, written=False)  # a meets b's counter: adds early's 0.003 only
    assert await a.spent_usd(limits) == pytest.approx(0.011)
    assert int(await a._redis.hget(f"{a.prefix}:s:k:total", "reserved")) == 0


async def test_spend_admitted_fail_open_counts_in_a_rebuilt_counter(make) -> None:
    lim = make()
    store = LaggingStore()
    lim.recorded_spend = store
    limits = Limits(subject="k", budget_usd=0.010, period="total")
    await _spend(lim, limits, store, 0.004, written=True, at=time.time() - 600)
    at = store.add(0.006, written=False)  # admitted while Redis was down; the store lags
    lim.count_unadmitted(limits, 0.006, at)
    await _wipe(lim)
    with pytest.raises(BudgetExceeded):
        await lim.admit(limits, 10, 0.0001)
