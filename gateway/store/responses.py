"""Responses kept for ``previous_response_id`` (the ``responses`` table, migration ``0007``).

A row is one response the Responses door served with ``store`` on: the input items of its
request (not the chain before it), its output items, the response it continued, and the
response object that ``GET /v1/responses/{id}`` returns. A request continuing a response
reads the whole chain in one recursive query, oldest first.

Rows are written by the request itself, not by the batched writer of
:mod:`gateway.store.writer`: a client sends the next turn as soon as it has read this one,
possibly to another replica, and a row still waiting in this replica's queue would not be
found there. So :meth:`ResponseStore.save` commits in a worker thread and the door awaits it
before the client reads the end of the answer. Saves that arrive while a commit is under way
wait for it and then go in together, one transaction for all (group commit): under
concurrent requests a commit per response was most of the Responses door's cost.

Every read is scoped to the caller's tenant and ignores rows older than the retention
(``MIXROUTE_RESPONSES_RETENTION_S``); expired rows are deleted by the process that writes,
at most once per :data:`PURGE_EVERY_S`.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any
from weakref import WeakKeyDictionary

from sqlalchemy import JSON, Engine, Index, String, delete, literal, select
from sqlalchemy.orm import Mapped, mapped_column

from gateway.store.models import Base, UTCDateTime

MAX_CHAIN = 1000
"""Longest ``previous_response_id`` chain followed (responses); a longer one is refused."""
PURGE_EVERY_S = 60.0
"""Least time between two deletions of expired rows by one process (seconds)."""
_PURGE_CHUNK = 1000


class StoredResponse(Base):
    """One stored response; ``tenant`` is ``None`` when auth is off."""

    __tablename__ = "responses"

    id: Mapped[str] = mapped_column(String, primary_key=True)
    tenant: Mapped[str | None] = mapped_column(String)
    request_id: Mapped[str | None] = mapped_column(String)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    previous_response_id: Mapped[str | None] = mapped_column(String)
    input_items: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    output_items: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    body: Mapped[dict[str, Any]] = mapped_column(JSON)

    __table_args__ = (Index("ix_responses_created_at", "created_at"),)


@dataclass
class ResponseRow:
    """What the door keeps of one response (see :class:`StoredResponse` for the fields)."""

    id: str
    tenant: str | None
    request_id: str | None
    previous_response_id: str | None
    input_items: list[dict]
    output_items: list[dict]
    body: dict
    created_at: datetime


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


def _mine(tenant: str | None):
    return StoredResponse.tenant.is_not_distinct_from(tenant)


def save(engine: Engine, row: ResponseRow) -> None:
    """Insert ``row`` and commit (blocking)."""
    save_many(engine, [row])


def save_many(engine: Engine, rows: list[ResponseRow]) -> None:
    """Insert ``rows`` and commit them in one transaction: all or none (blocking)."""
    with engine.begin() as conn:
        conn.execute(StoredResponse.__table__.insert(), [row.__dict__ for row in rows])


def load_chain(engine: Engine, response_id: str, tenant: str | None, cutoff: datetime) -> list[dict] | None:
    """The items of the conversation that ``response_id`` ends, oldest first: for each
    response of its chain, its input items then its output items (blocking).

    Returns:
        ``None`` when the response, or any response before it in the chain, is not this
        tenant's, has expired (older than ``cutoff``), was deleted, or the chain is longer
        than :data:`MAX_CHAIN`.
    """
    t = StoredResponse
    base = (select(t.id, t.previous_response_id, t.input_items, t.output_items, literal(0).label("depth"))
            .where(t.id == response_id, _mine(tenant), t.created_at >= cutoff))
    chain = base.cte("chain", recursive=True)
    step = (select(t.id, t.previous_response_id, t.input_items, t.output_items, (chain.c.depth + 1).label("depth"))
            .join(chain, t.id == chain.c.previous_response_id)
            .where(_mine(tenant), t.created_at >= cutoff, chain.c.depth < MAX_CHAIN))
    chain = chain.union_all(step)
    with engine.connect() as conn:
        rows = conn.execute(select(chain).order_by(chain.c.depth.desc())).all()
    if not rows or rows[0].previous_response_id is not None:  # missing, or a link gone
        return None
    items: list[dict] = []
    for row in rows:
        items.extend(row.input_items)
        items.extend(row.output_items)
    return items


def get(engine: Engine, response_id: str, tenant: str | None, cutoff: datetime) -> dict | None:
    """The stored response object, or ``None`` (blocking)."""
    t = StoredResponse
    with engine.connect() as conn:
        return conn.execute(select(t.body).where(t.id == response_id, _mine(tenant), t.created_at >= cutoff)).scalar()


def input_items(engine: Engine, response_id: str, tenant: str | None, cutoff: datetime) -> list[dict] | None:
    """The stored input items of the request that made ``response_id`` (not the chain
    before it), or ``None`` (blocking)."""
    t = StoredResponse
    with engine.connect() as conn:
        return conn.execute(select(t.input_items).where(t.id == response_id, _mine(tenant),
                                                        t.created_at >= cutoff)).scalar()


def remove(engine: Engine, response_id: str, tenant: str | None) -> bool:
    """Delete the tenant's response ``response_id``; whether there was one (blocking)."""
    t = StoredResponse
    with engine.begin() as conn:
        return conn.execute(delete(t).where(t.id == response_id, _mine(tenant))).rowcount > 0


def purge(engine: Engine, cutoff: datetime) -> int:
    """Delete responses created before ``cutoff``, in chunks; rows deleted (blocking)."""
    t = StoredResponse
    total = 0
    while True:
        with engine.begin() as conn:
            ids = conn.execute(select(t.id).where(t.created_at < cutoff).limit(_PURGE_CHUNK)).scalars().all()
            if not ids:
                return total
            total += conn.execute(delete(t).where(t.id.in_(ids))).rowcount


class ResponseStore:
    """The async face of this module for one store engine.

    Args:
        engine: the store's engine.
        retention_s: how long a response stays readable (seconds).
    """

    def __init__(self, engine: Engine, retention_s: float) -> None:
        self.engine = engine
        self.retention_s = retention_s
        self._purged_at = float("-inf")
        self._pending: list[tuple[ResponseRow, asyncio.Future]] = []
        self._flusher: asyncio.Task | None = None

    def cutoff(self) -> datetime:
        """The creation time before which a stored response has expired (UTC)."""
        return _utcnow() - timedelta(seconds=self.retention_s)

    async def save(self, row: ResponseRow) -> None:
        """Commit ``row``, then delete expired rows if :data:`PURGE_EVERY_S` has passed.

        Raises:
            sqlalchemy.exc.SQLAlchemyError: the database refused or is down.
        """
        done = asyncio.get_running_loop().create_future()
        self._pending.append((row, done))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush())
        await done
        now = time.monotonic()
        if now - self._purged_at >= PURGE_EVERY_S:
            self._purged_at = now
            await asyncio.to_thread(purge, self.engine, self.cutoff())

    async def _flush(self) -> None:
        """Commit the waiting rows, all that came meanwhile in one transaction, until none wait.
        A batch that fails is retried row by row, so that each save gets its own row's
        outcome (one bad row does not fail the others)."""
        batch: list[tuple[ResponseRow, asyncio.Future]] = []
        try:
            await self._flush_all(batch)
        finally:  # cancelled (the loop is closing): nobody may wait forever
            for _, done in batch + self._pending:
                _settle(done, RuntimeError("the response store's writer stopped"))

    async def _flush_all(self, batch: list[tuple[ResponseRow, asyncio.Future]]) -> None:
        while self._pending:
            batch[:], self._pending = self._pending, []
            try:
                await asyncio.to_thread(save_many, self.engine, [row for row, _ in batch])
            except Exception as exc:  # noqa: BLE001  # handed to the waiters, who raise it
                if len(batch) == 1:
                    _settle(batch[0][1], exc)
                    continue
                for row, done in batch:
                    try:
                        await asyncio.to_thread(save, self.engine, row)
                    except Exception as one:  # noqa: BLE001
                        _settle(done, one)
                    else:
                        _settle(done, None)
            else:
                for _, done in batch:
                    _settle(done, None)

    async def chain(self, response_id: str, tenant: str | None) -> list[dict] | None:
        """See :func:`load_chain`."""
        return await asyncio.to_thread(load_chain, self.engine, response_id, tenant, self.cutoff())

    async def get(self, response_id: str, tenant: str | None) -> dict | None:
        """See :func:`get`."""
        return await asyncio.to_thread(get, self.engine, response_id, tenant, self.cutoff())

    async def input_items(self, response_id: str, tenant: str | None) -> list[dict] | None:
        """See :func:`input_items`."""
        return await asyncio.to_thread(input_items, self.engine, response_id, tenant, self.cutoff())

    async def remove(self, response_id: str, tenant: str | None) -> bool:
        """See :func:`remove`."""
        return await asyncio.to_thread(remove, self.engine, response_id, tenant)


def _settle(done: asyncio.Future, exc: BaseException | None) -> None:
    if done.done():  # the waiter was cancelled (its client left); the row is saved all the same
        return
    if exc is None:
        done.set_result(None)
    else:
        done.set_exception(exc)


_BY_STORE: WeakKeyDictionary[Any, ResponseStore] = WeakKeyDictionary()


def response_store(store: Any, retention_s: float) -> ResponseStore:
    """The :class:`ResponseStore` of a started :class:`gateway.store.Store` (one per store,
    so that purges are paced per process).

    Raises:
        RuntimeError: the store has no engine (not started).
    """
    found = _BY_STORE.get(store)
    if found is None or found.engine is not store.engine:
        if store.engine is None:
            raise RuntimeError("the store is not started")
        found = _BY_STORE[store] = ResponseStore(store.engine, retention_s)
    found.retention_s = retention_s
    return found
