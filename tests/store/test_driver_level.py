"""The store's driver-level upsert (``write_items(driver_level=True)``) stores exactly what
SQLAlchemy's executemany stores, on SQLite and PostgreSQL, and refuses what it refuses."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from gateway.store.db import make_engine, upgrade
from gateway.store.models import TABLES
from gateway.store.rows import as_row
from gateway.store.upsert import _plan, write_items
from tests.store.conftest import rows
from tests.store.records import decision, outcome


def _items(tag: str) -> list[tuple[str, dict]]:
    items = []
    for i in range(30):
        items.append(("decisions", as_row(decision(f"{tag}{i}", at=i, signals={"pii": i % 2 == 0, "x": [1, None, "é"]},
                                                   tenant=None if i % 3 else "acme", prefix_hash=None))))
        items.append(("outcomes", as_row(outcome(f"{tag}{i}", at=i + 1, ttft_s=None, streamed=bool(i % 2)))))
    # A newer version of one request in the same batch, and an older one: the newest wins.
    items.append(("decisions", as_row(decision(f"{tag}0", at=100, chosen="newer"))))
    items.append(("decisions", as_row(decision(f"{tag}1", at=-100, chosen="older"))))
    items.append(("policies", {"hash": "h1", "text": "routes: {}", "first_seen": decision("x").created_at}))
    items.append(("feedback", {"id": f"{tag}f", "request_id": f"{tag}0", "created_at": decision("x").created_at,
                               "score": 0.5, "label": None, "comment": "ok", "source": "api", "tenant": None}))
    return items


def _dump(url: str) -> list[tuple]:
    out = []
    for table, key in (("decisions", "request_id"), ("outcomes", "request_id"), ("policies", "hash"),
                       ("feedback", "id")):
        out += [tuple(r) for r in rows(url, f"SELECT * FROM {table} ORDER BY {key}")]
    return out


def test_driver_level_rows_equal_sqlalchemy_rows(db_url: str) -> None:
    engine = make_engine(db_url)
    upgrade(engine)
    dumps = []
    for driver_level in (False, True):
        with engine.begin() as conn:
            for table in ("decisions", "outcomes", "policies", "feedback"):
                conn.execute(text(f"DELETE FROM {table}"))
        with engine.begin() as conn:
            assert write_items(conn, _items("r"), chunk=7, driver_level=driver_level) == 62  # two duplicate keys collapse
        dumps.append(_dump(db_url))
    engine.dispose()
    assert dumps[0] == dumps[1]
    assert len(dumps[1]) == 30 + 30 + 1 + 1
    chosen = {r[0]: r[7] for r in dumps[1][:30]}
    assert chosen["r0"] == "newer" and chosen["r1"] != "older"


def test_driver_level_plan_is_one_bind_per_column(db_url: str) -> None:
    engine = make_engine(db_url)
    for name, table in TABLES.items():
        plan = _plan(table, engine.dialect, ("hash",) if name == "policies" else
                     ("id",) if name == "feedback" else ("request_id",))
        assert plan is not None
        assert sorted(plan.columns) == sorted(c.name for c in table.columns)
    engine.dispose()


def test_driver_level_refuses_a_row_missing_a_column(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    engine = make_engine(url)
    upgrade(engine)
    row = as_row(decision("r1"))
    del row["chosen"]
    with pytest.raises(KeyError):
        with engine.begin() as conn:
            write_items(conn, [("decisions", row)], driver_level=True)
    assert rows(url, "SELECT count(*) FROM decisions") == [(0,)]
    engine.dispose()
