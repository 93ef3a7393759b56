"""The judge's daily spend read from the store (SQLite and PostgreSQL): today's ``(judge)``
outcomes of every replica, nothing from yesterday nor from other routes."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import pytest

from gateway.judge import ROUTE, DailySpend
from gateway.store.db import make_engine, upgrade
from gateway.store.rows import as_row
from gateway.store.upsert import write_items
from tests.store.records import decision, outcome


def test_today_counts_the_judges_outcomes_since_midnight(db_url: str) -> None:
    now = datetime.now(timezone.utc)
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if now - midnight < timedelta(minutes=2):
        pytest.skip("too close to UTC midnight for 'earlier today' rows")
    engine = make_engine(db_url)
    upgrade(engine)
    at = {"today": midnight + (now - midnight) / 2, "yesterday": midnight - timedelta(hours=1)}
    recs = []
    for rid, route, when, usd in (("j1", ROUTE, "today", 0.5), ("j2", ROUTE, "today", 0.25),
                                  ("j0", ROUTE, "yesterday", 4.0), ("t1", "auto", "today", 8.0)):
        recs += [("decisions", as_row(decision(rid, route=route, created_at=at[when]))),
                 ("outcomes", as_row(outcome(rid, cost_usd=usd, created_at=at[when])))]
    with engine.begin() as conn:
        write_items(conn, recs)
    try:
        spend = DailySpend(engine)
        assert asyncio.run(spend.today()) == pytest.approx(0.75)
        spend.add(0.1)  # spent here, not yet in the store
        assert asyncio.run(spend.today()) == pytest.approx(0.85)
    finally:
        engine.dispose()


def test_a_store_that_cannot_be_read_keeps_what_this_replica_knows(tmp_path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'nothing-here' / 'store.db'}")  # a folder that does not exist
    spend = DailySpend(engine)
    spend.add(0.3)
    assert asyncio.run(spend.today()) == pytest.approx(0.3)
    engine.dispose()
