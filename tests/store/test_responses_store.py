"""The ``responses`` table (migration 0007) and :mod:`gateway.store.responses` on SQLite and
PostgreSQL: chains read oldest first, per tenant, expiry and purge."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import event
from sqlalchemy.exc import IntegrityError

from gateway.store import current, head, upgrade
from gateway.store.db import make_engine
from gateway.store.models import Base
from gateway.store.responses import MAX_CHAIN, ResponseRow, ResponseStore, get, load_chain, purge, remove, save
from tests.store.conftest import downgrade, rows

NOW = datetime.now(timezone.utc)
LONG_AGO = NOW - timedelta(days=400)


def _row(rid: str, prev: str | None = None, tenant: str | None = "acme", at: datetime = NOW) -> ResponseRow:
    return ResponseRow(id=rid, tenant=tenant, request_id=f"mr-{rid}", previous_response_id=prev,
                       input_items=[{"type": "message", "role": "user", "content": f"in {rid}"}],
                       output_items=[{"type": "message", "role": "assistant", "id": f"msg_{rid}",
                                      "content": [{"type": "output_text", "text": f"out {rid}"}]}],
                       body={"id": rid, "object": "response"}, created_at=at)


def _texts(items: list[dict] | None) -> list[str]:
    return [i["content"] if isinstance(i["content"], str) else i["content"][0]["text"] for i in items or []]


def test_the_model_matches_the_migration(db_url: str) -> None:
    upgrade(db_url)
    engine = make_engine(db_url)
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={
            "include_name": lambda name, kind, _p: kind != "table" or name == "responses",
            "include_object": lambda obj, name, kind, *_: kind != "table" or name == "responses"})
        assert compare_metadata(ctx, Base.metadata) == []
    engine.dispose()


def test_0007_creates_and_drops_the_table(db_url: str) -> None:
    upgrade(db_url, "0006")
    upgrade(db_url, "0007")
    assert rows(db_url, "SELECT count(*) FROM responses") == [(0,)]
    downgrade(db_url, "0006")
    upgrade(db_url)
    assert current(db_url) == head()


def test_chain_oldest_first_per_tenant(db_url: str) -> None:
    upgrade(db_url)
    engine = make_engine(db_url)
    for rid, prev in (("r1", None), ("r2", "r1"), ("r3", "r2")):
        save(engine, _row(rid, prev))
    save(engine, _row("x1", None, tenant="globex"))
    save(engine, _row("open", None, tenant=None))  # auth off
    cutoff = NOW - timedelta(days=30)
    assert _texts(load_chain(engine, "r3", "acme", cutoff)) == ["in r1", "out r1", "in r2", "out r2", "in r3",
                                                                "out r3"]
    assert _texts(load_chain(engine, "r1", "acme", cutoff)) == ["in r1", "out r1"]
    assert load_chain(engine, "r3", "globex", cutoff) is None  # another tenant's
    assert load_chain(engine, "r3", None, cutoff) is None
    assert _texts(load_chain(engine, "open", None, cutoff)) == ["in open", "out open"]
    assert load_chain(engine, "open", "acme", cutoff) is None
    assert load_chain(engine, "nope", "acme", cutoff) is None
    assert get(engine, "r2", "acme", cutoff) == {"id": "r2", "object": "response"}
    assert get(engine, "r2", "globex", cutoff) is None
    # A link deleted in the middle breaks the chain: not a silently shorter conversation.
    assert not remove(engine, "r2", "globex") and remove(engine, "r2", "acme")
    assert load_chain(engine, "r3", "acme", cutoff) is None
    engine.dispose()


def test_a_chain_through_another_tenants_response_is_not_followed(db_url: str) -> None:
    upgrade(db_url)
    engine = make_engine(db_url)
    save(engine, _row("theirs", None, tenant="globex"))
    save(engine, _row("mine", "theirs", tenant="acme"))  # only a forged row could do this
    assert load_chain(engine, "mine", "acme", NOW - timedelta(days=1)) is None
    engine.dispose()


def test_expired_rows_are_unreadable_then_purged(db_url: str) -> None:
    upgrade(db_url)
    engine = make_engine(db_url)
    save(engine, _row("old", None, at=LONG_AGO))
    save(engine, _row("new", "old"))
    save(engine, _row("fresh", None))
    cutoff = NOW - timedelta(days=30)
    assert get(engine, "old", "acme", cutoff) is None
    assert load_chain(engine, "new", "acme", cutoff) is None  # its start expired
    assert purge(engine, cutoff) == 1
    assert sorted(r[0] for r in rows(db_url, "SELECT id FROM responses")) == ["fresh", "new"]
    engine.dispose()


def test_a_chain_longer_than_the_limit_is_refused(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    upgrade(url)
    engine = make_engine(url)
    prev = None
    for i in range(MAX_CHAIN + 2):
        save(engine, _row(f"r{i}", prev))
        prev = f"r{i}"
    cutoff = NOW - timedelta(days=1)
    assert load_chain(engine, f"r{MAX_CHAIN + 1}", "acme", cutoff) is None
    assert len(load_chain(engine, f"r{MAX_CHAIN}", "acme", cutoff)) == 2 * (MAX_CHAIN + 1)
    engine.dispose()


async def test_the_async_store_purges_when_it_saves(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    upgrade(url)
    engine = make_engine(url)
    store = ResponseStore(engine, retention_s=3600)
    save(engine, _row("old", None, at=NOW - timedelta(hours=2)))
    await store.save(_row("new", None))
    assert [r[0] for r in rows(url, "SELECT id FROM responses")] == ["new"]
    assert _texts(await store.chain("new", "acme")) == ["in new", "out new"]
    assert await store.get("old", "acme") is None
    engine.dispose()


async def test_concurrent_saves_commit_together_and_fail_alone(db_url: str) -> None:
    upgrade(db_url)
    engine = make_engine(db_url)
    commits = []
    event.listen(engine, "commit", lambda _conn: commits.append(1))
    store = ResponseStore(engine, retention_s=3600)
    await store.save(_row("first", None))  # alone: nothing else waits
    commits.clear()
    await asyncio.gather(*(store.save(_row(f"c{i}", None)) for i in range(20)))
    assert len(commits) == 1  # one transaction for the 20 that waited together
    # A row the database refuses (a taken id) fails its own save only; the others are stored.
    outcomes = await asyncio.gather(store.save(_row("ok1", None)), store.save(_row("c3", None)),
                                    store.save(_row("ok2", None)), return_exceptions=True)
    assert outcomes[0] is None and outcomes[2] is None and isinstance(outcomes[1], IntegrityError)
    assert len(rows(db_url, "SELECT id FROM responses WHERE id IN ('ok1', 'ok2')")) == 2
    assert rows(db_url, "SELECT count(*) FROM responses")[0][0] == 23
    engine.dispose()
