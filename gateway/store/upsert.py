"""Idempotent batched writes: ``INSERT ... ON CONFLICT`` on SQLite and PostgreSQL.

``decisions`` and ``outcomes`` upsert on ``request_id``: a replayed row never doubles, and
a newer record of the same request replaces an older one. "Newer" means a later or equal
``created_at`` (the conflict update has ``WHERE excluded.created_at >= created_at``), so
the result does not depend on the order rows arrive in; a journal replayed after fresher
rows were written cannot roll them back. ``policies`` insert once per hash and keep the
first ``first_seen``; ``feedback`` rows insert once per ``id`` (feedback is never edited,
so a replayed or retried row is simply ignored).

Time-partitioned PostgreSQL tables (docs/STORE.md) cannot have a unique key without the
partition column, so their primary key is ``(<key>, created_at)``: :func:`conflict_keys`
finds such tables and the upserts then conflict on both columns. A replayed row carries
its original ``created_at``, so replays still never double a row.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from sqlalchemy import Connection, Dialect, Table, text

from gateway.store.journal import Item
from gateway.store.models import TABLES

_PK = {"decisions": "request_id", "outcomes": "request_id", "policies": "hash", "feedback": "id"}
_INSERT_ONCE = {"policies", "feedback"}
_ORDER = ("policies", "decisions", "outcomes", "feedback")


def _insert(dialect: str) -> Any:
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    elif dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert
    else:  # pragma: no cover - guarded by the supported URLs
        raise NotImplementedError(f"store: no upsert for dialect {dialect!r} (use sqlite or postgresql)")
    return insert


Keys = dict[str, tuple[str, ...]]
"""Table name -> the columns its upserts conflict on."""

DEFAULT_KEYS: Keys = {name: (pk,) for name, pk in _PK.items()}


def conflict_keys(conn: Connection) -> Keys:
    """The conflict columns of each table on ``conn``'s database: ``(key, created_at)``
    for PostgreSQL tables partitioned by time, ``(key,)`` otherwise."""
    keys = dict(DEFAULT_KEYS)
    if conn.dialect.name != "postgresql":
        return keys
    partitioned = conn.execute(text(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE c.relkind = 'p' AND n.nspname = current_schema()")).scalars().all()
    for name in set(partitioned) & {"decisions", "outcomes", "feedback"}:
        keys[name] = (_PK[name], "created_at")
    return keys


@lru_cache(maxsize=64)
def _statement(table: Table, dialect: str, key: tuple[str, ...]) -> Any:
    # Built once per table, dialect and key: building the upsert (its ``excluded`` column
    # collection) for every batch cost the writer thread, holding the GIL, about a fifth
    # of its CPU time (200-row SQLite batch: 7.0 -> 5.6 ms of CPU, A/B in one process).
    stmt = _insert(dialect)(table)
    if table.name in _INSERT_ONCE:
        return stmt.on_conflict_do_nothing(index_elements=list(key))
    return stmt.on_conflict_do_update(
        index_elements=list(key),
        set_={c.name: stmt.excluded[c.name] for c in table.columns if c.name not in key},
        where=stmt.excluded.created_at >= table.c.created_at,
    )


@dataclass(frozen=True)
class _Plan:
    """An upsert compiled once for one dialect: its SQL text and, per parameter, the column
    it reads and that column's bind processor (the dialect's conversion of a Python value,
    e.g. a datetime to SQLite text, a list to JSON text)."""

    sql: str
    columns: tuple[str, ...]
    processors: tuple[Callable[[Any], Any] | None, ...]
    named: bool  # parameters by name (psycopg's pyformat) instead of by position

    def params(self, rows: list[dict[str, Any]]) -> list[Any]:
        """Driver parameters for ``rows``: tuples (positional styles) or dicts (named).

        Raises:
            KeyError: a row lacks one of the table's columns (the batch is refused).
        """
        cols = tuple(zip(self.columns, self.processors))
        if self.named:
            return [{c: (p(row[c]) if p else row[c]) for c, p in cols} for row in rows]
        return [tuple(p(row[c]) if p else row[c] for c, p in cols) for row in rows]


@lru_cache(maxsize=64)
def _plan(table: Table, dialect: Dialect, key: tuple[str, ...]) -> _Plan | None:
    # What SQLAlchemy's executemany does per row (bind processing, parameter checks, its
    # execution context) done once per statement instead: the store writer binds rows on a
    # thread that holds the GIL, so this CPU is taken from the event loop on a one-core
    # gateway (SQLite, 200-row batch: 3.33 -> 2.68 ms of CPU, ``python -m bench.store_writer
    # --write-cpu``, docs/STORE.md). ``None`` where the compiled form is not the plain
    # one-bind-per-column INSERT this relies on (then the ordinary execute is used).
    columns = tuple(c.name for c in table.columns)
    compiled = _statement(table, dialect.name, key).compile(dialect=dialect, column_keys=list(columns))
    names = tuple(compiled.positiontup) if compiled.positional else tuple(compiled.binds)
    if sorted(names) != sorted(columns):
        return None
    processors = tuple(table.c[n].type.dialect_impl(dialect).bind_processor(dialect) for n in names)
    return _Plan(compiled.string, names, processors, not compiled.positional)


def _dedupe(table: str, rows: list[dict[str, Any]], key: tuple[str, ...]) -> list[dict[str, Any]]:
    # One statement must not touch a key twice (PostgreSQL refuses that for a
    # multi-row upsert); keep, per key, the row that would win anyway.
    newest: dict[Any, dict[str, Any]] = {}
    for row in rows:
        k = tuple(row[c] for c in key)
        old = newest.get(k)
        if old is None or (table not in _INSERT_ONCE and row["created_at"] >= old["created_at"]):
            newest[k] = row
    return list(newest.values())


def write_items(conn: Connection, items: Sequence[Item], keys: Keys | None = None, *,
                chunk: int | None = None, pause_s: float = 0.0, driver_level: bool | None = None) -> int:
    """Upsert ``items`` on ``conn`` (the caller owns the transaction).

    Args:
        conn: an open connection inside a transaction.
        items: ``(table, row)`` pairs; rows hold exactly the table's columns.
        keys: conflict columns per table (:func:`conflict_keys`); default the primary keys.
        chunk: at most this many rows per statement (``None``: one statement per table).
        pause_s: sleep between two statements (seconds), so that a thread calling this
            gives up the GIL and the CPU between chunks (the store's writer thread).
        driver_level: bind the rows once per statement and hand them to the driver's
            ``executemany`` (:class:`_Plan`) instead of SQLAlchemy's per-row executemany;
            ``None`` (default): on SQLite only (on PostgreSQL SQLAlchemy's multi-row
            ``VALUES`` batching is faster, :func:`gateway.store.db.make_engine`).

    Returns:
        Number of distinct rows sent (after collapsing duplicate keys; rows).

    Raises:
        sqlalchemy.exc.SQLAlchemyError: the database refused the batch.
    """
    by_table: dict[str, list[dict[str, Any]]] = {}
    for table, row in items:
        by_table.setdefault(table, []).append(row)
    dialect = conn.dialect.name
    keys = keys or DEFAULT_KEYS
    if driver_level is None:
        driver_level = dialect == "sqlite"
    sent = 0
    for name in _ORDER:
        rows = by_table.pop(name, None)
        if rows:
            rows = _dedupe(name, rows, keys[name])
            plan = _plan(TABLES[name], conn.dialect, keys[name]) if driver_level else None
            stmt = _statement(TABLES[name], dialect, keys[name])
            step = chunk or len(rows)
            for start in range(0, len(rows), step):
                if sent and pause_s:
                    time.sleep(pause_s)
                part = rows[start:start + step]
                if plan is not None:
                    conn.exec_driver_sql(plan.sql, plan.params(part))
                else:
                    conn.execute(stmt, part)
                sent += len(part)
    if by_table:
        raise ValueError(f"store: unknown table(s) {sorted(by_table)}")
    return sent
