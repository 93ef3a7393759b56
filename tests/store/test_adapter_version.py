"""``decisions.adapter_version`` (migration ``0011_adapter_version``) on SQLite and
PostgreSQL: added and dropped by the migration, written by the store writer, replayed from
a journal line an older release wrote without it, exported."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from sqlalchemy import create_engine, inspect
from sqlalchemy.pool import NullPool

from gateway.store import Store, current, head, upgrade
from gateway.store.db import normalize_url
from gateway.store.export import DECISION_COLUMNS, iter_rows
from gateway.store.journal import Journal
from tests.store.conftest import downgrade, rows, settings_for
from tests.store.records import T0, decision


def _columns(url: str) -> set[str]:
    engine = create_engine(normalize_url(url), poolclass=NullPool)
    try:
        return {c["name"] for c in inspect(engine).get_columns("decisions")}
    finally:
        engine.dispose()


def test_0011_adds_the_column_and_downgrades(db_url: str) -> None:
    upgrade(db_url)
    assert "adapter_version" in _columns(db_url)
    downgrade(db_url, "0010_observations")
    assert "adapter_version" not in _columns(db_url) and "key_id" in _columns(db_url)
    upgrade(db_url)
    assert current(db_url) == head() and "adapter_version" in _columns(db_url)


async def test_the_writer_stores_it_and_replays_old_journal_lines(db_url: str, tmp_path: Path) -> None:
    journal = tmp_path / "j.jsonl"
    rec = decision("with-version")
    rec.adapter_version = "v20261206-010000"
    async with Store(settings_for(db_url), journal) as store:
        store.record_decision(rec)
        store.record_decision(decision("without"))
    old = decision("journaled-by-an-older-release").as_dict()
    del old["adapter_version"]
    Journal(journal).append([("decisions", old)])
    async with Store(settings_for(db_url), journal) as store:
        assert store.stats.replayed == 1
    assert sorted(rows(db_url, "SELECT request_id, adapter_version FROM decisions")) == [
        ("journaled-by-an-older-release", None), ("with-version", "v20261206-010000"), ("without", None)]
    engine = create_engine(normalize_url(db_url), poolclass=NullPool)
    try:
        exported = [r for chunk in iter_rows(engine, T0 - timedelta(days=1), T0 + timedelta(days=1)) for r in chunk]
    finally:
        engine.dispose()
    assert "adapter_version" in DECISION_COLUMNS
    assert {r["request_id"]: r["adapter_version"] for r in exported}["with-version"] == "v20261206-010000"
