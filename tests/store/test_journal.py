"""Nothing is lost: queue overflow, a down database, restarts and torn journal lines."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from gateway.store import Store
from gateway.store.db import normalize_url
from gateway.store.journal import Journal, encode
from gateway.store.writer import default_journal_path
from tests.store.conftest import pg_base_url, rows, settings_for
from tests.store.records import decision, outcome


def test_default_journal_is_one_per_database(tmp_path: Path) -> None:
    """Rows journaled for one database must never be replayed into another: each SQLite file
    and each PostgreSQL URL (host, database, schema; not the password) has its own file."""
    assert default_journal_path(f"sqlite:///{tmp_path}/a.db") == tmp_path / "a.db.journal.jsonl"
    assert default_journal_path(f"sqlite:///{tmp_path}/b.db") == tmp_path / "b.db.journal.jsonl"
    pg = default_journal_path("postgresql://u@h/db")
    assert pg.parent == Path.cwd() and pg.name.startswith("mixroute-journal-") and pg.suffix == ".jsonl"
    assert default_journal_path("postgresql://u:secret@h/db") == pg
    others = {default_journal_path(u) for u in ("postgresql://u@h/other", "postgresql://u@h2/db",
                                                 "postgresql://u@h/db?options=-csearch_path%3Ds1")}
    assert pg not in others and len(others) == 3


@pytest.mark.parametrize("name", ["mixroute-journal.jsonl", "mixroute-journal.jsonl.replaying"])
async def test_a_legacy_shared_journal_is_not_replayed(tmp_path: Path, caplog, name: str) -> None:
    """A journal from before the per-database names (or its half-replayed ``.replaying``
    twin) may hold another database's rows: it is left alone, with a warning saying where
    to move it if it belongs here."""
    url = f"sqlite:///{tmp_path}/a.db"
    legacy = tmp_path / name
    legacy.write_text(encode(("decisions", decision("from-elsewhere").as_dict())) + "\n")
    store = Store(settings_for(url))
    with caplog.at_level("WARNING", logger="mixroute.store"):
        await store.start()
        await store.stop()
    assert rows(url, "SELECT request_id FROM decisions") == []
    assert legacy.exists() and "is not replayed" in caplog.text and "a.db.journal-8000.jsonl" in caplog.text
    assert name in caplog.text


async def test_a_journal_from_before_per_port_names_is_left_with_a_warning(tmp_path: Path, caplog) -> None:
    """The database's journal without the port (an earlier release's default) is not
    replayed by a gateway whose default now has its port: the warning says how to replay it."""
    url = f"sqlite:///{tmp_path}/a.db"
    old = default_journal_path(url)
    old.write_text(encode(("decisions", decision("from-before").as_dict())) + "\n")
    store = Store(settings_for(url))
    with caplog.at_level("WARNING", logger="mixroute.store"):
        await store.start()
        await store.stop()
    assert old.exists() and store.journal.path == tmp_path / "a.db.journal-8000.jsonl"
    assert f"MIXROUTE_STORE_JOURNAL_PATH={old}" in caplog.text


def test_a_journal_path_that_is_a_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    with pytest.raises(ValueError, match="is a directory"):
        Journal(tmp_path / "sub")
    assert (tmp_path / "sub").is_dir()
    from gateway.settings import Settings

    assert Settings(store_journal_path="").store_journal_path is None  # empty = unset


async def test_full_queue_spills_to_the_journal_and_is_replayed(db_url: str, tmp_path: Path) -> None:
    store = Store(settings_for(db_url, store_queue_size=5), tmp_path / "j.jsonl")
    for i in range(20):  # before start(): 5 fit in the queue, 15 overflow
        store.record_decision(decision(f"r{i:02d}"))
    assert store.queued == 5 and store.stats.overflowed == 15
    assert len(store.journal.path.read_text().splitlines()) == 15
    async with store:
        await store.flush()
        assert rows(db_url, "SELECT count(*) FROM decisions") == [(20,)]
        assert store.stats.replayed == 15 and store.stats.written == 5
        assert not store.journal.pending()


async def test_sqlite_down_then_back(tmp_path: Path) -> None:
    db_dir = tmp_path / "not-yet"  # SQLite cannot open a file in a missing directory
    url = f"sqlite:///{db_dir / 'store.db'}"
    store = Store(settings_for(url), tmp_path / "j.jsonl", retry_interval_s=0.05)
    await store.start()  # down at start: no exception, the writer keeps going
    for i in range(10):
        store.record_decision(decision(f"r{i}"))
        store.record_outcome(outcome(f"r{i}"))
    await store.flush()
    assert store.stats.spilled == 20 and store.journal.pending()
    assert not db_dir.exists()

    db_dir.mkdir()  # the database is back
    await store.flush()
    assert store.stats.replayed == 20 and not store.journal.pending()
    store.record_decision(decision("after"))
    await store.stop()
    assert rows(url, "SELECT count(*) FROM decisions") == [(11,)]
    assert rows(url, "SELECT count(*) FROM outcomes") == [(10,)]


async def test_journal_is_retried_without_new_rows(tmp_path: Path) -> None:
    db_dir = tmp_path / "later"
    url = f"sqlite:///{db_dir / 'store.db'}"
    store = Store(settings_for(url), tmp_path / "j.jsonl", retry_interval_s=0.05)
    async with store:
        store.record_decision(decision("r1"))
        await store.flush()
        assert store.journal.pending()
        db_dir.mkdir()
        for _ in range(100):  # the writer's own retry, no flush()
            if not store.journal.pending():
                break
            await asyncio.sleep(0.02)
        assert rows(url, "SELECT request_id FROM decisions") == [("r1",)]


async def test_stop_while_down_journals_and_next_start_replays(tmp_path: Path) -> None:
    db_dir = tmp_path / "gone"
    url = f"sqlite:///{db_dir / 'store.db'}"
    journal = tmp_path / "j.jsonl"
    store = Store(settings_for(url, store_flush_interval_s=30), journal)
    await store.start()
    for i in range(5):
        store.record_decision(decision(f"r{i}"))
    await store.stop()
    assert store.stats.spilled == 5

    db_dir.mkdir()
    async with Store(settings_for(url), journal) as again:
        assert again.stats.replayed == 5  # at start, before any new row
    assert rows(url, "SELECT count(*) FROM decisions") == [(5,)]


async def test_replaying_rows_already_written_does_not_double_them(db_url: str, tmp_path: Path) -> None:
    journal = tmp_path / "j.jsonl"
    async with Store(settings_for(db_url), journal) as store:
        store.record_decision(decision("r1", chosen="new", at=5))
        store.record_outcome(outcome("r1"))
    # As after a crash between commit and journal deletion: the same rows, plus an
    # older version of r1, replayed at the next start.
    Journal(journal).append([("decisions", decision("r1", chosen="old").as_dict()),
                             ("decisions", decision("r1", chosen="new", at=5).as_dict()),
                             ("outcomes", outcome("r1").as_dict())])
    async with Store(settings_for(db_url), journal) as store:
        assert store.stats.replayed == 3
    assert rows(db_url, "SELECT request_id, chosen FROM decisions") == [("r1", "new")]
    assert rows(db_url, "SELECT count(*) FROM outcomes") == [(1,)]


async def test_a_torn_journal_line_is_kept_aside(db_url: str, tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.jsonl")
    journal.append([("decisions", decision("r1").as_dict())])
    with open(journal.path, "a") as fh:
        fh.write('{"t": "decisions", "row": {"request_')  # crash mid-write
    async with Store(settings_for(db_url), journal.path):
        pass
    assert rows(db_url, "SELECT request_id FROM decisions") == [("r1",)]
    assert journal.rejected.read_text().startswith('{"t": "decisions"')
    assert not journal.pending()


async def test_postgresql_down_then_back(tmp_path: Path) -> None:
    base = normalize_url(pg_base_url())
    name = f"mixroute_down_{uuid.uuid4().hex[:10]}"
    url = base.set(database=name).render_as_string(hide_password=False)  # does not exist yet
    admin = create_engine(base, poolclass=NullPool, isolation_level="AUTOCOMMIT")
    store = Store(settings_for(url), tmp_path / "j.jsonl", retry_interval_s=0.05)
    try:
        await store.start()
        for i in range(10):
            store.record_decision(decision(f"r{i}"))
        await store.flush()
        assert store.stats.spilled == 10 and store.journal.pending()
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        await store.flush()
        assert store.stats.replayed == 10 and not store.journal.pending()
        await store.stop()
        assert rows(url, "SELECT count(*) FROM decisions") == [(10,)]
    finally:
        await store.stop()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


async def test_an_outcome_journaled_before_the_cache_write_columns_is_replayed(db_url: str, tmp_path: Path) -> None:
    # A journal written by a release before migration 0005 has outcome rows without
    # tokens_cache_write(_1h): they are replayed with NULL there, not rejected.
    journal = tmp_path / "j.jsonl"
    old = outcome("r1").as_dict()
    del old["tokens_cache_write"], old["tokens_cache_write_1h"]
    Journal(journal).append([("decisions", decision("r1").as_dict()), ("outcomes", old)])
    async with Store(settings_for(db_url), journal) as store:
        store.record_outcome(outcome("r2", tokens_cache_write=40, tokens_cache_write_1h=0))
    assert store.stats.replayed == 2 and store.stats.rejected == 0
    assert rows(db_url, "SELECT request_id, tokens_cache_write, tokens_cache_write_1h FROM outcomes "
                        "ORDER BY request_id") == [("r1", None, None), ("r2", 40, 0)]
