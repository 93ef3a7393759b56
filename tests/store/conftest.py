"""Store fixtures: a real SQLite file, and a real PostgreSQL when
``MIXROUTE_TEST_DATABASE_URL`` is set (a fresh schema per test, dropped afterwards)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from gateway.settings import Settings
from gateway.store.db import normalize_url

PG_ENV = "MIXROUTE_TEST_DATABASE_URL"
PG_SKIP = f"PostgreSQL store tests need {PG_ENV} (e.g. postgresql+psycopg://postgres@127.0.0.1:5432/test)"


def pg_base_url() -> str:
    url = os.environ.get(PG_ENV)
    if not url:
        pytest.skip(PG_SKIP)
    return url


@contextmanager
def fresh_pg_schema() -> Iterator[str]:
    """A URL whose ``search_path`` is a new, empty PostgreSQL schema, dropped on exit."""
    base = normalize_url(pg_base_url())
    schema = f"mixroute_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(base, poolclass=NullPool)
    with admin.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    try:
        url = base.update_query_dict({"options": f"-csearch_path={schema}"})
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.begin() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database URL with no tables in it: SQLite file, or a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.db'}"
        return
    with fresh_pg_schema() as url:
        yield url


def settings_for(url: str, **kw: object) -> Settings:
    """Settings for a store test: short flush interval so tests stay fast."""
    kw.setdefault("store_flush_interval_s", 0.02)
    return Settings(database_url=url, **kw)


def rows(url: str, sql: str, **params: object) -> list[tuple]:
    """Run a read query on a fresh engine (independent of the store under test)."""
    engine = create_engine(normalize_url(url), poolclass=NullPool)
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(text(sql), params)]
    finally:
        engine.dispose()


def downgrade(url: str, revision: str) -> None:
    """Migrate the database at ``url`` down to ``revision`` (tests only: the gateway never
    downgrades; :func:`gateway.store.db.upgrade` is its counterpart)."""
    from alembic import command

    from gateway.store.db import alembic_config, make_engine

    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            command.downgrade(alembic_config(connection=conn), revision)
    finally:
        engine.dispose()
