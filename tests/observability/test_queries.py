"""Dashboard queries and sessions without a server: a store with no feedback table, the
percentile and savings rules, cookie expiry."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from backends.config import Pricing
from gateway.dashboard import queries
from gateway.dashboard.session import Sessions, Viewer, is_loopback
from gateway.store.models import Base, Decision, Outcome

NOW = datetime(2026, 1, 1, 12, tzinfo=timezone.utc)
PRICES = {"big": Pricing(input_per_1m=10, output_per_1m=30), "small": Pricing(input_per_1m=1, output_per_1m=2)}


@pytest.fixture
def engine(tmp_path):
    engine = sa.create_engine(f"sqlite:///{tmp_path}/q.db")
    Base.metadata.create_all(engine, tables=[Decision.__table__, Outcome.__table__])  # no feedback table
    yield engine
    engine.dispose()


def _request(engine, rid: str, chosen: str, cost: float, *, tenant="t", status="ok", at=NOW, pinned=False,
             **outcome):
    cands = [{"backend": "big", "predicted_quality": 0.9, "expected_cost_usd": 0.01},
             {"backend": "small", "predicted_quality": 0.8, "expected_cost_usd": 0.001}]
    with engine.begin() as conn:
        conn.execute(sa.insert(Decision).values(
            request_id=rid, created_at=at, tenant=tenant, route="auto", endpoint="chat", policy_hash="h",
            pinned=pinned, chosen=chosen, reason="r", probability=1.0, prefix_hash=None,
            candidates=[c for c in cands if not pinned or c["backend"] == chosen], fallbacks=[], signals={"bar": 0.8}))
        conn.execute(sa.insert(Outcome).values(
            request_id=rid, created_at=at, backend=chosen, model=chosen, status=status, http_status=200,
            error_code=None, fallbacks_taken=[], ttft_s=0.1, itl_s=None, latency_s=0.2, tokens_in=1000,
            tokens_out=500, tokens_cached=0, cost_usd=cost, streamed=False, **outcome))


def test_summary_without_feedback_table_and_savings(engine):
    _request(engine, "a", "small", 0.002)                 # big would cost 0.01 + 0.015 = 0.025
    _request(engine, "b", "small", 0.0, status="error")   # errors save nothing
    _request(engine, "c", "big", 0.025, pinned=True)      # pinned: strongest is itself
    w = queries.Window(NOW - timedelta(hours=1), NOW + timedelta(hours=1))
    data = queries.summary(engine, w, PRICES)
    assert data["quality"] is None
    s = data["savings"]
    assert s["requests"] == 2 and s["actual_usd"] == pytest.approx(0.027)
    assert s["strongest_usd"] == pytest.approx(0.05) and s["saved_vs_strongest_usd"] == pytest.approx(0.023)
    assert s["reference"] == "big" and s["saved_vs_reference_usd"] == pytest.approx(0.023)
    assert data["totals"]["errors"] == 1 and data["mix"]["overall"] == {"small": 2, "big": 1}


def test_savings_price_cache_writes_at_the_alternatives_write_prices(engine):
    """Written prompt tokens are repriced at the other backend's write prices (5-minute and
    1-hour), or its plain input price when it has none; a NULL count (not reported) is no write."""
    prices = {"big": Pricing(input_per_1m=10, output_per_1m=30, cache_write_input_per_1m=12.5,
                             cache_write_1h_input_per_1m=20),
              "small": Pricing(input_per_1m=1, output_per_1m=2)}
    _request(engine, "a", "small", 0.002, tokens_cache_write=800, tokens_cache_write_1h=200)
    w = queries.Window(NOW - timedelta(hours=1), NOW + timedelta(hours=1))
    s = queries.summary(engine, w, prices)["savings"]
    big = (200 * 10 + 600 * 12.5 + 200 * 20 + 500 * 30) / 1e6  # 0.0285, not 0.025 (all at the input price)
    assert s["strongest_usd"] == pytest.approx(big) and s["saved_vs_strongest_usd"] == pytest.approx(big - 0.002)
    assert queries.summary(engine, w, {"big": PRICES["big"], "small": PRICES["small"]})["savings"][
        "strongest_usd"] == pytest.approx(0.025)  # no write prices: written tokens cost what input costs


def test_refusals_are_counted_and_save_nothing(engine):
    """A request refused after its decision (budget, rate limit, rule) served nothing: it is
    counted in ``totals.rejected`` and adds no saving (repricing its prompt tokens at the
    strongest candidate's prices made a refusal look like money saved)."""
    _request(engine, "a", "small", 0.002)
    _request(engine, "r", "small", 0.0, status="rejected")
    w = queries.Window(NOW - timedelta(hours=1), NOW + timedelta(hours=1))
    data = queries.summary(engine, w, PRICES)
    assert data["totals"]["rejected"] == 1 and data["totals"]["errors"] == 0 and data["totals"]["requests"] == 2
    assert data["savings"]["requests"] == 1
    assert data["savings"]["saved_vs_strongest_usd"] == pytest.approx(0.023)


def test_savings_fall_back_to_expected_cost_when_the_policy_lost_the_backend(engine):
    _request(engine, "a", "small", 0.002)
    w = queries.Window(NOW - timedelta(hours=1), NOW + timedelta(hours=1))
    s = queries.summary(engine, w, {"small": PRICES["small"]})["savings"]
    assert s["strongest_usd"] == pytest.approx(0.01)  # the decision's expected cost of "big"


def test_window_and_tenant_filters(engine):
    _request(engine, "old", "small", 1.0, at=NOW - timedelta(days=2))
    _request(engine, "other", "small", 1.0, tenant="u")
    _request(engine, "mine", "small", 0.5)
    w = queries.Window(NOW - timedelta(hours=1), NOW + timedelta(hours=1), tenant="t")
    data = queries.summary(engine, w, PRICES)
    assert data["totals"]["requests"] == 1 and data["totals"]["spend_usd"] == 0.5
    assert queries.summary(engine, queries.Window(NOW, NOW + timedelta(hours=1), "nobody"), PRICES)["empty"]


def test_percentile_is_nearest_rank():
    assert queries.percentile([], 50) is None
    assert queries.percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert queries.percentile([float(i) for i in range(1, 101)], 99) == 99.0


def test_sessions_sign_expire_and_depend_on_the_admin_key():
    s = Sessions("k1", ttl_s=60)
    cookie = s.issue(Viewer(admin=False, tenant="acme", key_id="id1"), now=1000)
    v = s.verify(cookie, now=1030)
    assert (v.admin, v.tenant, v.key_id, v.exp) == (False, "acme", "id1", 1060) and v.sid
    assert s.verify(cookie, now=1061) is None
    assert Sessions("k2").verify(cookie, now=1030) is None
    assert s.verify("garbage", now=1030) is None and s.verify(None) is None


def test_a_revoked_session_is_refused_and_others_are_not():
    s = Sessions("k1", ttl_s=60)
    now = time.time()
    first, second = (s.issue(Viewer(admin=True), now=now) for _ in range(2))

    async def run():
        assert (await s.check(first)).sid != (await s.check(second)).sid  # one sid per login
        await s.revoke(s.verify(first))
        return await s.check(first), await s.check(second)

    gone, kept = asyncio.run(run())
    assert gone is None and kept is not None


def test_loopback():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("127.3.2.1")
    assert not is_loopback("10.0.0.1") and not is_loopback("testclient") and not is_loopback(None)


async def test_the_worker_process_gives_the_same_summary_and_maps_store_errors(engine, tmp_path):
    """The gateway computes summaries in a worker process (gateway/dashboard/worker.py), so a
    large store never holds the request path's GIL: same answer as in-process."""
    import os

    from gateway.dashboard import worker

    _request(engine, "a", "small", 0.002)
    _request(engine, "c", "big", 0.025, pinned=True)
    w = queries.Window(NOW - timedelta(hours=1), NOW + timedelta(hours=1))
    try:
        here = queries.summary(engine, w, PRICES)
        there = await worker.summary(str(engine.url), w, PRICES, None)
        assert there == here
        pids = {p.pid for p in worker._pool._processes.values()}
        assert pids and os.getpid() not in pids
        with pytest.raises(worker.StoreDown):
            await worker.summary(f"sqlite:///{tmp_path}/missing-folder/none.db", w, PRICES, None)
    finally:
        worker.shutdown()
