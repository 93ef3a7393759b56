"""Feedback in the store: migration 0003, idempotent writes, finding the rated decision."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect
from sqlalchemy.exc import OperationalError
from sqlalchemy.pool import NullPool

from gateway.store import Store, current, head, upgrade
from gateway.store.db import normalize_url
from gateway.store.feedback import FeedbackRecord, RecentDecisions
from gateway.store.journal import Journal
from tests.store.conftest import downgrade, rows, settings_for
from tests.store.records import decision


def _tables(url: str) -> set[str]:
    engine = create_engine(normalize_url(url), poolclass=NullPool)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_migration_0003_up_and_down(db_url: str) -> None:
    upgrade(db_url, "0002")
    assert "feedback" not in _tables(db_url)
    upgrade(db_url)
    assert current(db_url) == head() and "feedback" in _tables(db_url)
    downgrade(db_url, "0002")
    assert "feedback" not in _tables(db_url) and {"decisions", "api_keys"} <= _tables(db_url)


async def test_feedback_rows_are_written_once_per_id(db_url: str, tmp_path: Path) -> None:
    fb = FeedbackRecord(request_id="r1", score=0.25, label="meh", comment="ok-ish", tenant="acme")
    journal = tmp_path / "j.jsonl"
    async with Store(settings_for(db_url), journal) as store:
        store.record_decision(decision("r1"))
        store.record_feedback(fb)
        store.record_feedback(fb)  # a retried request
        store.record_feedback(FeedbackRecord(request_id="r1", score=1.0))
    Journal(journal).append([("feedback", fb.as_dict())])  # and a replay after a crash
    async with Store(settings_for(db_url), journal) as store:
        assert store.stats.replayed == 1
    assert rows(db_url, "SELECT score, label, comment, source, tenant FROM feedback ORDER BY score") == [
        (0.25, "meh", "ok-ish", "api", "acme"), (1.0, None, None, "api", None)]


async def test_find_decision_in_memory_then_in_the_database(db_url: str, tmp_path: Path) -> None:
    async with Store(settings_for(db_url, store_flush_interval_s=30), tmp_path / "a.jsonl") as store:
        store.record_decision(decision("queued", tenant="acme"))
        ref = await store.find_decision("queued", wait_s=0)  # still in the queue
        assert ref is not None and ref.tenant == "acme"
        assert rows(db_url, "SELECT count(*) FROM decisions") == [(0,)]
        assert await store.find_decision("nope", wait_s=0.1) is None
    async with Store(settings_for(db_url), tmp_path / "b.jsonl") as other:  # another replica
        ref = await other.find_decision("queued", wait_s=0)
        assert ref is not None and ref.tenant == "acme"


async def test_find_decision_with_the_database_down(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'missing' / 'store.db'}"
    async with Store(settings_for(url), tmp_path / "j.jsonl") as store:
        store.record_decision(decision("mine"))
        assert (await store.find_decision("mine", wait_s=0)).request_id == "mine"  # memory: still works
        with pytest.raises(OperationalError):
            await store.find_decision("elsewhere", wait_s=0)  # unknown here, and cannot ask: not a 404


def test_recent_decisions_forget_the_oldest() -> None:
    recent = RecentDecisions(maxlen=2)
    for rid in ("a", "b", "c"):
        recent.add(rid, None)
    assert recent.get("a") is None and recent.get("c") is not None
