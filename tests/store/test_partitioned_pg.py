"""The PostgreSQL time-partitioning recipe of docs/STORE.md, run as written: the store
keeps working on the converted tables (writes, replays without doubles, feedback lookup,
export, prune)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import create_engine
from sqlalchemy.pool import NullPool
from typer.testing import CliRunner

from gateway.cli import app
from gateway.store import Store
from gateway.store.db import normalize_url, upgrade
from gateway.store.feedback import FeedbackRecord
from gateway.store.journal import Journal
from tests.store.conftest import downgrade, fresh_pg_schema, pg_base_url, rows, settings_for
from tests.store.records import decision, outcome

DOC = Path(__file__).resolve().parents[2] / "docs" / "STORE.md"
NOW = datetime.now(timezone.utc)


def recipe_steps() -> list[str]:
    """The ```sql blocks of docs/STORE.md that start with ``-- step``."""
    blocks = re.findall(r"```sql\n(.*?)```", DOC.read_text(), flags=re.S)
    return [b for b in blocks if b.startswith("-- step")]


def _run_sql(url: str, sql: str) -> None:
    engine = create_engine(normalize_url(url), poolclass=NullPool)
    raw = engine.raw_connection()  # no parameters: the % of format('%I') must reach the server as is
    try:
        raw.cursor().execute(sql)
        raw.commit()
    finally:
        raw.close()
        engine.dispose()


async def test_store_on_time_partitioned_tables(tmp_path: Path) -> None:
    pg_base_url()  # skips without MIXROUTE_TEST_DATABASE_URL
    steps = recipe_steps()
    assert len(steps) == 2, "docs/STORE.md: expected two '-- step' SQL blocks"
    old = NOW - timedelta(days=120)
    with fresh_pg_schema() as url:
        upgrade(url)
        async with Store(settings_for(url), tmp_path / "a.jsonl") as store:  # rows from before the conversion
            store.record_decision(decision("before", created_at=old))
            store.record_outcome(outcome("before", created_at=old + timedelta(seconds=2)))
        for sql in steps:
            _run_sql(url, sql)
        assert rows(url, "SELECT relkind::text FROM pg_class WHERE relname = 'decisions' "
                         "AND relnamespace = current_schema()::regnamespace") == [("p",)]

        journal = tmp_path / "b.jsonl"
        async with Store(settings_for(url), journal) as store:
            store.record_decision(decision("after", created_at=NOW))
            store.record_outcome(outcome("after", created_at=NOW + timedelta(seconds=1), status="error"))
            store.record_outcome(outcome("after", created_at=NOW + timedelta(seconds=1), status="ok"))
            assert (await store.find_decision("before", wait_s=0)).tenant == "acme"
            fb = FeedbackRecord(request_id="after", score=0.9)
            store.record_feedback(fb)
        Journal(journal).append([("decisions", decision("after", created_at=NOW).as_dict()),
                                 ("feedback", fb.as_dict())])  # replayed after a crash
        async with Store(settings_for(url), journal) as store:
            assert store.stats.replayed == 2 and store.stats.rejected == 0
        assert rows(url, "SELECT request_id FROM decisions ORDER BY created_at") == [("before",), ("after",)]
        assert rows(url, "SELECT request_id, status FROM outcomes ORDER BY created_at") == [
            ("before", "ok"), ("after", "ok")]
        assert rows(url, "SELECT count(*) FROM feedback") == [(1,)]
        month = f"decisions_{NOW:%Y_%m}"
        assert rows(url, f'SELECT request_id FROM "{month}"') == [("after",)]  # in its month, not the default

        out = tmp_path / "x.jsonl"
        runner = CliRunner()
        res = runner.invoke(app, ["logs", "export", str(out), "--database-url", url])
        assert res.exit_code == 0 and "2 request(s)" in res.output, res.output
        res = runner.invoke(app, ["logs", "prune", "--older-than", "90d", "--database-url", url])
        assert "deleted 1 decision(s), 1 outcome(s), 0 feedback" in res.output, res.output
        assert rows(url, "SELECT request_id FROM decisions") == [("after",)]


#: A migration that alters a partitioned table, checked on one: (revision, the one before,
#: table, its new columns, a row using them, what the row reads back in them and, after
#: the downgrade, in the columns that stay).
_PARTITIONED_MIGRATIONS = [
    ("0005", "0004", "outcomes", ("tokens_cache_write", "tokens_cache_write_1h"),
     "INSERT INTO outcomes (request_id, created_at, backend, model, status, http_status, fallbacks_taken, tokens_in, "
     "tokens_out, tokens_cached, tokens_cache_write, tokens_cache_write_1h, cost_usd, streamed) VALUES ('w', now(), "
     "'b', 'm', 'ok', 200, '[]', 50, 2, 0, 40, 10, 0.01, false)", (40, 10), ("tokens_in", 50)),
    ("0006", "0005", "decisions", ("key_id",),
     "INSERT INTO decisions (request_id, created_at, tenant, key_id, route, endpoint, policy_hash, pinned, chosen, "
     "reason, probability, candidates, fallbacks, signals) VALUES ('w', now(), 'acme', 'key1', 'auto', 'chat', 'h', "
     "false, 'b', 'pinned', 1.0, '[]', '[]', '{}')", ("key1",), ("tenant", "acme")),
]


@pytest.mark.parametrize(("revision", "before", "table", "columns", "insert", "new", "kept"), _PARTITIONED_MIGRATIONS,
                         ids=[m[0] for m in _PARTITIONED_MIGRATIONS])
def test_migration_on_time_partitioned_tables(revision, before, table, columns, insert, new, kept) -> None:
    # docs/STORE.md: a migration that alters a partitioned table must be checked on one.
    # Its columns reach every partition, its downgrade drops them from every partition, and a
    # row in a month's partition keeps its data.
    pg_base_url()
    with fresh_pg_schema() as url:
        upgrade(url, before)
        for sql in recipe_steps():
            _run_sql(url, sql)
        upgrade(url, revision)
        month = f"{table}_{NOW:%Y_%m}"
        names = ", ".join(f"'{c}'" for c in columns)
        cols = ("SELECT count(*) FROM information_schema.columns WHERE table_schema = current_schema() "
                f"AND table_name = :t AND column_name IN ({names})")
        for t in (table, month, f"{table}_default"):
            assert rows(url, cols, t=t) == [(len(columns),)], t
        _run_sql(url, insert)
        assert rows(url, f'SELECT {", ".join(columns)} FROM "{month}"') == [new]
        downgrade(url, before)
        assert rows(url, cols, t=table) == [(0,)] and rows(url, cols, t=month) == [(0,)]
        assert rows(url, f'SELECT request_id, {kept[0]} FROM "{month}"') == [("w", kept[1])]
