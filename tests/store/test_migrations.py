"""Migrations on SQLite and PostgreSQL, and the ``mixroute db`` commands."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, inspect
from sqlalchemy.pool import NullPool
from typer.testing import CliRunner

from gateway.cli import app
from gateway.store import current, head, normalize_url, upgrade
from gateway.store.models import TABLES, Base, Decision, Outcome
from router.records import DecisionRecord, OutcomeRecord
from tests.store.conftest import downgrade, fresh_pg_schema


def test_revisions_form_one_chain_from_0001() -> None:
    from alembic.script import ScriptDirectory

    from gateway.store.db import alembic_config

    script = ScriptDirectory.from_config(alembic_config())
    chain = [rev.revision for rev in script.walk_revisions()]  # head first
    assert chain[0] == head() and chain[-1] == "0001"


def test_upgrade_head_and_current(db_url: str) -> None:
    assert current(db_url) is None
    upgrade(db_url)
    assert current(db_url) == head()
    upgrade(db_url)  # a second upgrade is a no-op
    with _engine(db_url) as engine:
        assert {"decisions", "outcomes", "policies"} <= set(inspect(engine).get_table_names())
    assert _indexes(db_url, "decisions") == {"ix_decisions_created_at"}
    assert _indexes(db_url, "outcomes") == {"ix_outcomes_created_at"}


def test_store_models_match_the_migrations(db_url: str) -> None:
    upgrade(db_url)
    with _engine(db_url) as engine, engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={
            # Only this package's tables; other packages' tables have their own tests.
            "include_name": lambda name, kind, _p: kind != "table" or name in TABLES,
            "include_object": lambda obj, name, kind, *_: kind != "table" or name in TABLES,
        })
        diff = compare_metadata(ctx, Base.metadata)
    assert diff == []


def test_columns_are_the_record_fields() -> None:
    # The writer turns a record's as_dict() into a row as is.
    assert set(Decision.__table__.columns.keys()) == set(DecisionRecord.__dataclass_fields__)
    assert set(Outcome.__table__.columns.keys()) == set(OutcomeRecord.__dataclass_fields__)


@pytest.mark.parametrize(("given", "driver"), [
    ("postgresql://u:p@h:5432/db", "postgresql+psycopg"),
    ("postgres://u@h/db", "postgresql+psycopg"),
    ("postgresql+psycopg://u@h/db", "postgresql+psycopg"),
    ("sqlite:///x.db", "sqlite"),
])
def test_normalize_url(given: str, driver: str) -> None:
    assert normalize_url(given).drivername == driver


def test_cli_upgrade_then_current(db_url: str) -> None:
    runner = CliRunner()
    res = runner.invoke(app, ["db", "current", "--database-url", db_url])
    assert res.exit_code == 0, res.output
    assert res.output.startswith("none")
    res = runner.invoke(app, ["db", "upgrade", "--database-url", db_url])
    assert res.exit_code == 0, res.output
    assert f"at revision {head()}" in res.output
    assert current(db_url) == head()
    res = runner.invoke(app, ["db", "current", "--database-url", db_url])
    assert res.output.strip() == f"{head()} (up to date)"


def test_cli_defaults_to_settings_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path / 'env.db'}"
    monkeypatch.setenv("MIXROUTE_DATABASE_URL", url)
    res = CliRunner().invoke(app, ["db", "upgrade"])
    assert res.exit_code == 0, res.output
    assert current(url) == head()


def test_cli_unreachable_database_exits_1_without_password() -> None:
    res = CliRunner().invoke(app, ["db", "upgrade", "--database-url",
                                   "postgresql://u:hunter2@127.0.0.1:1/x?connect_timeout=2"])
    assert res.exit_code == 1
    assert "hunter2" not in res.output
    assert "OperationalError" in res.output


def test_concurrent_upgrades_do_not_collide(db_url: str) -> None:
    # Several gateway replicas starting at once each run upgrade() at start.
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda _: upgrade(db_url), range(4)))
    assert current(db_url) == head()


def test_upgrade_waits_for_another_replica_on_postgresql() -> None:
    # Replicas in other processes serialise on a PostgreSQL advisory lock: while one holds
    # it, upgrade() waits instead of racing to CREATE TABLE.
    import threading

    from sqlalchemy import text

    from gateway.store.db import _MIGRATION_LOCK_KEY

    with fresh_pg_schema() as url:
        holder_engine = create_engine(normalize_url(url), poolclass=NullPool)
        try:
            with holder_engine.begin() as holder:
                holder.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _MIGRATION_LOCK_KEY})
                other = threading.Thread(target=upgrade, args=(url,))
                other.start()
                other.join(0.5)
                assert other.is_alive() and current(url) is None
            other.join(10)
            assert not other.is_alive() and current(url) == head()
        finally:
            holder_engine.dispose()


@contextmanager
def _engine(url: str):
    """A pool-less engine for ``url``, disposed on exit."""
    engine = create_engine(normalize_url(url), poolclass=NullPool)
    try:
        yield engine
    finally:
        engine.dispose()


def _columns(url: str, table: str) -> set[str]:
    with _engine(url) as engine:
        return {c["name"] for c in inspect(engine).get_columns(table)}


def _outcome_columns(url: str) -> set[str]:
    return _columns(url, "outcomes")


def _indexes(url: str, table: str) -> set[str]:
    with _engine(url) as engine:
        return {ix["name"] for ix in inspect(engine).get_indexes(table)}


def _execute(url: str, sql: str) -> None:
    from sqlalchemy import text

    with _engine(url) as engine, engine.begin() as conn:
        conn.execute(text(sql))


_WRITE_COLUMNS = {"tokens_cache_write", "tokens_cache_write_1h"}
_OLD_OUTCOME = ("INSERT INTO outcomes (request_id, created_at, backend, model, status, http_status, error_code, "
                "fallbacks_taken, ttft_s, itl_s, latency_s, tokens_in, tokens_out, tokens_cached, cost_usd, streamed) "
                "VALUES ('old', '2026-11-30 12:00:00', 'b', 'm', 'ok', 200, NULL, '[]', 0.1, NULL, 0.2, 10, 2, 0, "
                "0.001, false)")


def test_0005_adds_the_cache_write_columns_and_downgrades(db_url: str) -> None:
    from tests.store.conftest import rows

    upgrade(db_url, "0004")
    assert not _WRITE_COLUMNS & _outcome_columns(db_url)
    _execute(db_url, _OLD_OUTCOME)  # a row written before the revision
    upgrade(db_url, "0005")
    assert _WRITE_COLUMNS <= _outcome_columns(db_url)
    assert rows(db_url, "SELECT tokens_cache_write, tokens_cache_write_1h FROM outcomes") == [(None, None)]

    downgrade(db_url, "0004")
    assert not _WRITE_COLUMNS & _outcome_columns(db_url)
    assert rows(db_url, "SELECT request_id, tokens_in FROM outcomes") == [("old", 10)]  # rows kept
    # SQLite rebuilt the table in the downgrade: its index must have come back
    assert _indexes(db_url, "outcomes") == {"ix_outcomes_created_at"}
    upgrade(db_url)
    assert current(db_url) == head() and _WRITE_COLUMNS <= _outcome_columns(db_url)


_OLD_DECISION = ("INSERT INTO decisions (request_id, created_at, tenant, route, endpoint, policy_hash, pinned, chosen, "
                 "reason, probability, prefix_hash, candidates, fallbacks, signals) VALUES ('old', "
                 "'2026-11-30 12:00:00', 'acme', 'auto', 'chat', 'h', false, 'b', 'pinned', 1.0, NULL, '[]', '[]', '{}')")


def test_0006_adds_the_decision_key_id_and_downgrades(db_url: str) -> None:
    from tests.store.conftest import rows

    upgrade(db_url, "0005")
    assert "key_id" not in _columns(db_url, "decisions")
    _execute(db_url, _OLD_DECISION)  # a row written before the revision
    upgrade(db_url, "0006")
    assert rows(db_url, "SELECT request_id, tenant, key_id FROM decisions") == [("old", "acme", None)]
    downgrade(db_url, "0005")
    assert "key_id" not in _columns(db_url, "decisions")
    assert rows(db_url, "SELECT request_id, tenant FROM decisions") == [("old", "acme")]  # rows kept
    assert _indexes(db_url, "decisions") == {"ix_decisions_created_at"}  # back after SQLite's rebuild
    upgrade(db_url)
    assert current(db_url) == head() and "key_id" in _columns(db_url, "decisions")


def test_0008_adds_usage_estimated_and_downgrades(db_url: str) -> None:
    from tests.store.conftest import rows

    upgrade(db_url, "0007")
    assert "usage_estimated" not in _outcome_columns(db_url)
    _execute(db_url, _OLD_OUTCOME)  # a row written before the revision: its estimate is unknown
    upgrade(db_url, "0008_usage_estimated")
    assert rows(db_url, "SELECT request_id, usage_estimated FROM outcomes") == [("old", None)]
    downgrade(db_url, "0007")
    assert "usage_estimated" not in _outcome_columns(db_url)
    assert rows(db_url, "SELECT request_id, tokens_in FROM outcomes") == [("old", 10)]  # rows kept
    assert _indexes(db_url, "outcomes") == {"ix_outcomes_created_at"}  # back after SQLite's rebuild
    upgrade(db_url)
    assert current(db_url) == head() and "usage_estimated" in _outcome_columns(db_url)


_TENANT_LIMITS = {"rpm", "tpm", "routes"}


def test_0009_adds_the_tenant_limits_and_downgrades(db_url: str) -> None:
    from tests.store.conftest import rows

    upgrade(db_url, "0008_usage_estimated")
    assert not _TENANT_LIMITS & _columns(db_url, "tenants")
    _execute(db_url, "INSERT INTO tenants (name, budget_usd, period, updated_at) "
                     "VALUES ('acme', 5.0, 'month', '2026-12-01 00:00:00')")  # a row written before the revision
    upgrade(db_url, "0009_tenant_limits")
    assert rows(db_url, "SELECT name, budget_usd, rpm, tpm, routes FROM tenants") == [("acme", 5.0, None, None, None)]
    downgrade(db_url, "0008_usage_estimated")
    assert not _TENANT_LIMITS & _columns(db_url, "tenants")
    assert rows(db_url, "SELECT name, budget_usd FROM tenants") == [("acme", 5.0)]  # rows kept
    upgrade(db_url)
    assert current(db_url) == head() and _TENANT_LIMITS <= _columns(db_url, "tenants")


def _tables(url: str) -> set[str]:
    with _engine(url) as engine:
        return set(inspect(engine).get_table_names())


def test_0010_adds_observations_and_downgrades(db_url: str) -> None:
    upgrade(db_url)
    assert _columns(db_url, "observations") == {"id", "request_id", "created_at", "backend", "route", "tenant",
                                                "score", "predicted", "probability", "source"}
    assert _indexes(db_url, "observations") == {"ix_observations_created_at"}
    from gateway.store.db import alembic_config
    from alembic.script import ScriptDirectory

    below = ScriptDirectory.from_config(alembic_config()).get_revision("0010_observations").down_revision
    downgrade(db_url, below)
    assert "observations" not in _tables(db_url) and "decisions" in _tables(db_url)
    upgrade(db_url)
    assert current(db_url) == head() and "observations" in _tables(db_url)
