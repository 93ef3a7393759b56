"""Feedback waiting for its decision, resolved off the request path.

``POST /v1/feedback`` answers before it knows whether the rated request exists: every
well-formed feedback is accepted into a bounded queue and answered 202 at once, whether the
request is the caller's, another tenant's or unknown, so the answer and its timing say
nothing about other tenants' request ids. A background task then resolves the queue: a
claim whose decision is found (in :class:`gateway.store.feedback.RecentDecisions`, or in the
``decisions`` table, where another replica's decision appears once it flushes) and belongs to
the caller is recorded; one still unknown ``wait_s`` after it arrived, or about another
tenant's request, is dropped (logged, counted in :attr:`FeedbackQueue.dropped`).

The queue's lookups batch every pending id into one query per tick, on a thread of their
own, so a flood of feedback holds neither the event loop, nor the default thread pool the
request path uses (key lookups), nor more than one database connection. While the database
cannot be queried, claims not found in memory wait (bounded by ``max_pending``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from sqlalchemy import Engine, select
from sqlalchemy.exc import SQLAlchemyError

from gateway.store.feedback import FeedbackRecord
from gateway.store.models import Decision

log = logging.getLogger("mixroute.store")

CHUNK = 500
"""Request ids per lookup query."""


@dataclass(frozen=True)
class Claim:
    """One accepted feedback and who sent it.

    Attributes:
        record: the row to write (its ``tenant`` is set from the decision once found).
        tenant: the caller's tenant.
        any_tenant: the caller may rate any request (the admin key, or auth off).
        deadline: ``time.monotonic()`` after which a request still unknown is dropped.
    """

    record: FeedbackRecord
    tenant: str | None
    any_tenant: bool
    deadline: float


class FeedbackQueue:
    """Bounded queue of :class:`Claim`, resolved by a background task.

    Args:
        store: the :class:`gateway.store.writer.Store` (its ``recent`` decisions, its engine,
            ``record_feedback``).
        max_pending: claims held at once (``MIXROUTE_FEEDBACK_MAX_PENDING``).
        wait_s: how long a claim waits for a decision another replica may still be writing
            (seconds): several times the default ``store_flush_interval_s`` of 0.2 s.
        poll_s: pause between lookups while claims wait (seconds).
    """

    def __init__(self, store, max_pending: int, wait_s: float = 1.0, poll_s: float = 0.1) -> None:
        self.store = store
        self.max_pending = max_pending
        self.wait_s = wait_s
        self.poll_s = poll_s
        self.recorded = 0
        self.dropped = 0
        self._pending: list[Claim] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mixroute-feedback")
        self._store_down = False

    def submit(self, record: FeedbackRecord, tenant: str | None, any_tenant: bool) -> bool:
        """Queue ``record``; ``False`` when ``max_pending`` claims already wait."""
        if len(self._pending) >= self.max_pending:
            return False
        self._pending.append(Claim(record, tenant, any_tenant, time.monotonic() + self.wait_s))
        self._wake.set()
        return True

    @property
    def pending(self) -> int:
        return len(self._pending)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="mixroute-feedback")

    async def aclose(self) -> None:
        """Stop the task after one last pass (call before the store stops)."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        await self._resolve(final=True)
        if self._pending:
            log.warning("feedback: %d feedback rows dropped at shutdown, their requests not yet found",
                        len(self._pending))
            self.dropped += len(self._pending)
            self._pending = []
        self._pool.shutdown(wait=False)

    async def _run(self) -> None:
        while True:
            if self._pending:
                try:
                    await asyncio.wait_for(self._wake.wait(), self.poll_s)
                except asyncio.TimeoutError:
                    pass
            else:
                await self._wake.wait()
            self._wake.clear()
            try:
                await self._resolve()
            except Exception:  # never let the resolver die: claims would pile up unresolved
                log.exception("feedback: resolving the queue failed")

    async def _resolve(self, final: bool = False) -> None:
        claims, self._pending = self._pending, []
        tenants: dict[str, str | None] = {}
        unknown = []
        for c in claims:
            ref = self.store.recent.get(c.record.request_id)
            if ref is not None:
                tenants[ref.request_id] = ref.tenant
            else:
                unknown.append(c.record.request_id)
        looked_up = True
        if unknown and self.store.engine is not None:
            try:
                found = await asyncio.get_running_loop().run_in_executor(
                    self._pool, _tenants, self.store.engine, sorted(set(unknown)))
                tenants.update(found)
                self._store_down = False
            except SQLAlchemyError as exc:
                looked_up = False
                if not self._store_down:
                    log.warning("feedback: decisions cannot be looked up (%s); %d feedback rows wait",
                                type(exc).__name__, len(unknown))
                self._store_down = True
        now = time.monotonic()
        for c in claims:
            rid = c.record.request_id
            if rid in tenants:
                self._settle(c, tenants[rid])
            elif final or not looked_up or now < c.deadline:
                self._pending.append(c)  # at the final pass, aclose drops what is left
            else:
                self._drop(c, "no such request")

    def _settle(self, c: Claim, owner: str | None) -> None:
        if not (c.any_tenant or owner == c.tenant):
            self._drop(c, "another tenant's request")
            return
        c.record.tenant = owner
        self.store.record_feedback(c.record)
        self.recorded += 1

    def _drop(self, c: Claim, why: str) -> None:
        self.dropped += 1
        log.info("feedback %s dropped: %s (request id %r, caller tenant %r)", c.record.id, why,
                 c.record.request_id[:100], c.tenant)


def _tenants(engine: Engine, request_ids: list[str]) -> dict[str, str | None]:
    """``request_id -> tenant`` of the decisions among ``request_ids`` in the database."""
    found: dict[str, str | None] = {}
    with engine.connect() as conn:
        for i in range(0, len(request_ids), CHUNK):
            chunk = request_ids[i:i + CHUNK]
            q = select(Decision.request_id, Decision.tenant).where(Decision.request_id.in_(chunk))
            found.update((rid, tenant) for rid, tenant in conn.execute(q))
    return found
