"""Idempotent batched writes: ``INSERT ... ON CONFLICT`` on SQLite and PostgreSQL.

``decisions`` and ``outcomes`` upsert on ``request_id``: a replayed row never doubles, and
a newer record of the same request replaces an older one. "Newer" means a later or equal
``created_at`` (the conflict update has ``WHERE excluded.created_at >= created_at``), so
the result does not depend on the order rows arrive in; a journal replayed after fresher
rows were written cannot roll them back. ``policies`` insert once per hash and keep the
first ``first_seen``; ``feedback`` rows insert once per ``id`` (feedback is never edited,
so a replayed or retried row is simply ignored).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Table

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


def _statement(table: Table, dialect: str) -> Any:
    stmt = _insert(dialect)(table)
    pk = _PK[table.name]
    if table.name in _INSERT_ONCE:
        return stmt.on_conflict_do_nothing(index_elements=[pk])
    return stmt.on_conflict_do_update(
        index_elements=[pk],
        set_={c.name: stmt.excluded[c.name] for c in table.columns if c.name != pk},
        where=stmt.excluded.created_at >= table.c.created_at,
    )


def _dedupe(table: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # One statement must not touch a key twice (PostgreSQL refuses that for a
    # multi-row upsert); keep, per key, the row that would win anyway.
    pk = _PK[table]
    newest: dict[Any, dict[str, Any]] = {}
    for row in rows:
        old = newest.get(row[pk])
        if old is None or (table not in _INSERT_ONCE and row["created_at"] >= old["created_at"]):
            newest[row[pk]] = row
    return list(newest.values())


def write_items(conn: Connection, items: Sequence[Item]) -> int:
    """Upsert ``items`` on ``conn`` (the caller owns the transaction).

    Args:
        conn: an open connection inside a transaction.
        items: ``(table, row)`` pairs; rows hold exactly the table's columns.

    Returns:
        Number of distinct rows sent (after collapsing duplicate keys; rows).

    Raises:
        sqlalchemy.exc.SQLAlchemyError: the database refused the batch.
    """
    by_table: dict[str, list[dict[str, Any]]] = {}
    for table, row in items:
        by_table.setdefault(table, []).append(row)
    dialect = conn.dialect.name
    sent = 0
    for name in _ORDER:
        rows = by_table.pop(name, None)
        if rows:
            rows = _dedupe(name, rows)
            conn.execute(_statement(TABLES[name], dialect), rows)
            sent += len(rows)
    if by_table:
        raise ValueError(f"store: unknown table(s) {sorted(by_table)}")
    return sent
