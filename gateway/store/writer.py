"""The store writer: batched, asynchronous, and lossless.

``record_*`` never block and never raise: they put a row on a bounded
:class:`asyncio.Queue` (or, when it is full, append it to the journal). One background
task drains the queue in batches of ``store_batch_size`` rows or every
``store_flush_interval_s`` seconds and upserts them in a worker thread.

Where a row can end up::

    record_*() -> queue ----------------------> database (upsert, idempotent)
              \\-> journal (queue full)        ^
    batch fails, database down -> journal ----/ replayed in order at the next
                                                successful flush, start or retry
    database refuses a row (bad data) -> <journal>.rejected (kept, never retried)
    journal line unreadable at replay -> <journal>.rejected (kept, counted, logged)
    journal at its size cap -> dropped, counted (``capped``) and logged

While the database is down and the journal cannot take more rows (its cap or its disk
nearly reached, or an append failed), :meth:`Store.keeps_records` is false (:mod:`gateway.store.loss`): the gateway
refuses new requests (``store_on_loss: refuse``, :func:`gateway.api.deps.hot_path_deps`)
instead of answering requests whose records would be lost.

Logs carry counts, table names and error classes only: never row contents, never prompts.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, exc

from gateway.settings import Settings
from gateway.store.db import make_engine, normalize_url, safe_url, upgrade
from gateway.store.feedback import DecisionRef, FeedbackRecord, RecentDecisions, find_decision
from gateway.store.journal import Item, Journal
from gateway.store.loss import LossGuard
from gateway.store.priority import IdlePolicy
from gateway.store.rows import StoreStats, as_row, default_journal_path, error_text, warn_old_journals
from gateway.store.upsert import DEFAULT_KEYS, conflict_keys, write_items
from router.records import DecisionRecord, OutcomeRecord

log = logging.getLogger("mixroute.store")

CHUNK_ROWS, CHUNK_PAUSE_S = 25, 0.0002
"""Live batches are upserted ``CHUNK_ROWS`` rows per statement with a ``CHUNK_PAUSE_S``
sleep between statements (one transaction still), unless a backlog of a batch or more is
queued: then in one statement per table, for throughput (the pauses cost some PostgreSQL
throughput: ``python -m bench.store_writer`` against ``--unpaced``). Binding rows holds the
GIL, about 25 us per row here: a 200-row batch in one statement kept the event loop from
running for ~5 ms, which on one core showed up in the pass-through p99
(``python -m bench.tail_latency``: ``base`` against ``unchunked``)."""
_DOWN = (exc.OperationalError, exc.InterfaceError, exc.TimeoutError, exc.DisconnectionError)
"""Errors that mean "database unreachable / not ready": spill and retry, never reject."""


class Store:
    """Batched asynchronous writer of decisions, outcomes, feedback and policies.

    Use from one event loop: ``await start()``, then ``record_*`` from request handlers,
    ``await stop()`` at shutdown (or ``async with Store(settings) as store:``).
    ``record_*`` may also be called from other threads (sync endpoints run in a thread
    pool); such calls are handed to the loop thread.

    Args:
        settings: uses ``database_url``, ``store_queue_size`` (rows),
            ``store_batch_size`` (rows), ``store_flush_interval_s`` (seconds) and
            ``store_journal_max_bytes`` (bytes).
        journal_path: spill file; default :func:`default_journal_path` of the database and
            ``settings.port``. The store locks it while it runs.
        retry_interval_s: while the database is down or the journal is not empty, how
            often the writer retries without new rows (seconds).
    """

    def __init__(self, settings: Settings, journal_path: str | Path | None = None,
                 *, retry_interval_s: float = 1.0) -> None:
        self.settings = settings
        self.url = normalize_url(settings.database_url).render_as_string(hide_password=False)
        journal_path = journal_path or settings.store_journal_path
        self._default_journal = not journal_path
        self.journal = Journal(Path(journal_path) if journal_path else
                               default_journal_path(self.url, settings.port),
                               max_bytes=settings.store_journal_max_bytes)
        self.recent = RecentDecisions()
        self.stats = StoreStats()
        self.retry_interval_s = retry_interval_s
        self._queue: asyncio.Queue[Item] = asyncio.Queue(maxsize=settings.store_queue_size)
        self._batch: list[Item] = []
        self._engine: Engine | None = None
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._hurry = asyncio.Event()  # set by flush()/stop(): do not wait to fill a batch
        self._wake = asyncio.Event()  # set when _collect's batch could be full, or hurried
        self._wanted = 0  # rows _collect waits for (0: not waiting)
        self._io = threading.Lock()
        # The writer's own thread (not asyncio's shared pool: its scheduling policy changes).
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="mixroute-store")
        self._policy = IdlePolicy(settings.store_writer_idle)  # the writer thread's scheduling policy
        self._migrated = False
        self._keys = DEFAULT_KEYS
        self._down = False
        self.loss = LossGuard(settings, self.journal, safe_url(self.url))
        self._closed = False
        self._policies_seen: set[str] = set()

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        """Create the engine, migrate to head, replay the journal, start the writer task.

        A database that is down does not fail start: rows are journaled and migration
        and replay are retried every ``retry_interval_s``.

        Raises:
            gateway.store.journal_lock.JournalInUse: another process uses the same journal.
            sqlalchemy.exc.ArgumentError, sqlalchemy.exc.NoSuchModuleError: bad URL/driver.
            alembic.util.CommandError: the database is at a revision this build lacks.
        """
        if self._task is not None:
            return
        if self.settings.store_on_loss == "serve":
            log.warning("store: MIXROUTE_STORE_ON_LOSS=serve: when neither the database nor the journal can take "
                        "records, requests are still answered and their records lost")
        self.journal.lock()  # before any replay: another replica's journal is not ours to replay
        self._loop, self._loop_thread = asyncio.get_running_loop(), threading.get_ident()
        self._engine = make_engine(self.url)
        if self._default_journal:
            warn_old_journals(self.url, self.journal.path)
        await self._in_writer(self._cycle, [], True)
        self._task = asyncio.create_task(self._run(), name="mixroute-store-writer")

    async def flush(self) -> None:
        """Wait until every row recorded so far is committed or journaled, then retry
        the journal once. Raises ``RuntimeError`` before :meth:`start`."""
        if self._task is None:
            raise RuntimeError("Store.flush() before start()")
        self._hurry.set()
        self._wake.set()
        try:
            await self._queue.join()
        finally:
            self._hurry.clear()
        await self._in_writer(self._cycle, [])

    async def stop(self) -> None:
        """Drain the queue, make a last replay attempt, and dispose of the engine.

        Rows recorded after ``stop()`` began go straight to the journal.
        """
        if self._closed:
            return
        self._closed = True
        if self._task is not None:
            self._hurry.set()
            self._wake.set()
            await self._queue.join()
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        leftover = self._batch + self._drain_nowait()
        self._batch = []
        if self._engine is None:
            await self._in_writer(self._spill, leftover)
            self._executor.shutdown(wait=True)
            self.journal.unlock()
            return
        await self._in_writer(self._cycle, leftover)
        self._executor.shutdown(wait=True)
        self.journal.unlock()
        self._engine.dispose()
        log.info("store stopped: %s", self.stats)

    async def __aenter__(self) -> Store:
        await self.start()
        return self

    async def __aexit__(self, *_: Any) -> None:
        await self.stop()

    # -- recording (event-loop thread, non-blocking) -----------------------------------

    def record_decision(self, rec: DecisionRecord) -> None:
        """Queue a decision row (upserted on ``request_id``)."""
        self.recent.add(rec.request_id, rec.tenant)
        self._put(("decisions", as_row(rec)))

    def record_outcome(self, rec: OutcomeRecord) -> None:
        """Queue an outcome row (upserted on ``request_id``)."""
        self._put(("outcomes", as_row(rec)))

    def record_feedback(self, rec: FeedbackRecord) -> None:
        """Queue a feedback row (inserted once per ``rec.id``)."""
        self._put(("feedback", as_row(rec)))

    async def find_decision(self, request_id: str, *, wait_s: float = 1.0) -> DecisionRef | None:
        """The decision of ``request_id`` if this process recorded it or the database
        has it (polled up to ``wait_s`` seconds); see :func:`gateway.store.feedback.find_decision`.

        Raises:
            sqlalchemy.exc.SQLAlchemyError: not recorded here and the database cannot be queried.
        """
        return await find_decision(self.recent, self._engine, request_id, wait_s=wait_s)

    def record_policy(self, hash: str, text: str) -> None:
        """Queue a policy text once per hash per process; the first ``first_seen`` wins."""
        if hash in self._policies_seen:
            return
        self._policies_seen.add(hash)
        self._put(("policies", {"hash": hash, "text": text, "first_seen": datetime.now(timezone.utc)}))

    @property
    def engine(self) -> Engine | None:
        """The store's engine (``None`` before :meth:`start`), e.g. for read queries."""
        return self._engine

    @property
    def queued(self) -> int:
        """Rows waiting in the in-memory queue (rows)."""
        return self._queue.qsize()

    def keeps_records(self) -> bool:
        """Whether a new request's records can be kept (:class:`LossGuard`)."""
        return self.loss.keeps(self._down, self._queue.qsize() + len(self._batch))

    def _put(self, item: Item) -> None:
        if self._loop is not None and threading.get_ident() != self._loop_thread:
            try:  # asyncio.Queue is not thread-safe
                self._loop.call_soon_threadsafe(self._put, item)
                return
            except RuntimeError:  # loop closed: the journal is thread-safe
                self._closed = True
        if not self._closed:
            try:
                self._queue.put_nowait(item)
                if self._wanted and self._queue.qsize() >= self._wanted:
                    self._wake.set()
                return
            except asyncio.QueueFull:
                pass
        try:
            # fsync deferred to the writer thread: the loop must not wait for the disk.
            if not self.journal.append([item], fsync=self._closed):
                self._capped(1)
                return
        except OSError as err:
            self.loss.journal_failed()
            self.stats.lost += 1
            log.error("store: %s row lost: queue full and journal unwritable (%s)", item[0], error_text(err))
            return
        self.stats.overflowed += 1
        if self.stats.overflowed & (self.stats.overflowed - 1) == 0:  # 1, 2, 4, 8, ...
            log.warning("store: queue full (%d rows); %d row(s) journaled to %s so far",
                        self._queue.maxsize, self.stats.overflowed, self.journal.path)

    def _drain_nowait(self) -> list[Item]:
        items = []
        while not self._queue.empty():
            items.append(self._queue.get_nowait())
            self._queue.task_done()
        return items

    # -- writer task -------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            batch = await self._collect()
            try:
                await self._in_writer(self._cycle, batch)
            finally:
                self._batch = []
                for _ in batch:
                    self._queue.task_done()

    async def _collect(self) -> list[Item]:
        """Up to ``store_batch_size`` rows, waiting at most ``store_flush_interval_s``
        after the first; empty after ``retry_interval_s`` when a retry is due."""
        loop = asyncio.get_running_loop()
        batch = self._batch = []
        retry_due = self._down or not self._migrated or self.journal.pending()
        try:
            batch.append(await asyncio.wait_for(self._queue.get(),
                                                self.retry_interval_s if retry_due else None))
        except TimeoutError:
            return batch
        deadline = loop.time() + self.settings.store_flush_interval_s
        size = self.settings.store_batch_size
        while True:
            while len(batch) < size and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            remaining = deadline - loop.time()
            if len(batch) >= size or remaining <= 0 or self._hurry.is_set():
                return batch
            # One wait per batch, woken by _put once the queue holds the rest of a full
            # batch: waiting row by row (two futures and an asyncio.wait per row) was about
            # 4% of the event loop's busy time at concurrency 1 (py-spy on bench.tail_latency).
            self._wanted = size - len(batch)
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), remaining)
            except TimeoutError:
                pass
            finally:
                self._wanted = 0

    async def _in_writer(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    # -- worker thread -----------------------------------------------------------------

    def _cycle(self, batch: list[Item], raise_unexpected: bool = False) -> None:
        """Migrate if needed, replay the journal, then write ``batch`` (in that order, so
        older rows reach the database first). On failure ``batch`` is journaled."""
        with self._io:
            try:
                if not self._migrated:
                    upgrade(self._engine)
                    with self._engine.connect() as conn:
                        self._keys = conflict_keys(conn)
                    self._migrated = True
                self._replay()
                if self._down and not batch:
                    self._probe()  # nothing to write may be nothing to fail: ask the database
                self.stats.written += self._write(batch, paced=True)
                if self._down:
                    self._down = False
                    self.loss.database_back()
                    log.warning("store: database %s reachable again", safe_url(self.url))
            except _DOWN as err:
                if not self._down:
                    self._down = True
                    log.warning("store: database %s unavailable (%s); journaling to %s",
                                safe_url(self.url), error_text(err), self.journal.path)
                self._spill(batch)
            except Exception as err:
                self._spill(batch)
                if raise_unexpected:
                    raise
                log.error("store: unexpected error, %d row(s) journaled (%s)", len(batch), error_text(err))
            finally:
                self._sync_journal()

    def _probe(self) -> None:
        """One round trip to the database (raises as :meth:`_write` does when it is down)."""
        with self._engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")

    def _replay(self) -> None:
        for _ in range(3):  # bounded: rows journaled meanwhile wait for the next cycle
            if not self.journal.begin_replay():
                return
            n = 0
            # Larger chunks than live batches: after an outage there is a backlog to clear.
            for chunk in self.journal.batches(max(self.settings.store_batch_size, 500)):
                n += self._write(chunk)
            self.journal.end_replay()
            self.stats.damaged += len(self.journal.last_damage)
            self.stats.replayed += n
            log.warning("store: replayed %d journaled row(s) from %s", n, self.journal.path)

    def _write(self, items: list[Item], paced: bool = False) -> int:
        """Upsert ``items`` in one transaction; if the database refuses the batch for
        its data, retry row by row and set refused rows aside. Returns rows committed.
        ``paced``: in chunks with pauses (:data:`CHUNK_ROWS`) unless a backlog is queued.

        Raises:
            sqlalchemy.exc.OperationalError (and the rest of ``_DOWN``): database down.
        """
        if not items:
            return 0
        assert self._engine is not None
        try:
            # qsize() from this thread: a racy read of a length, good enough for a hint.
            backlog = self._queue.qsize() >= self.settings.store_batch_size
            self._policy.set(idle=not backlog)  # gateway.store.priority
            paced = paced and not backlog
            with self._engine.begin() as conn:
                write_items(conn, items, self._keys, chunk=CHUNK_ROWS if paced else None,
                            pause_s=CHUNK_PAUSE_S if paced else 0.0)
            return len(items)
        except _DOWN:
            raise
        except Exception as err:
            log.warning("store: batch of %d refused (%s); retrying row by row", len(items), error_text(err))
        ok = 0
        for item in items:
            try:
                with self._engine.begin() as conn:
                    write_items(conn, [item], self._keys)
                ok += 1
            except _DOWN:
                raise
            except Exception as err:
                self.journal.reject([item])
                self.stats.rejected += 1
                log.error("store: %s row refused, kept in %s (%s)", item[0], self.journal.rejected, error_text(err))
        return ok

    def _spill(self, items: list[Item]) -> None:
        if not items:
            return
        try:
            kept = self.journal.append(items)
            self.stats.spilled += kept
            if kept < len(items):
                self._capped(len(items) - kept)
        except OSError as err:
            self.loss.journal_failed()
            self.stats.lost += len(items)
            log.error("store: %d row(s) lost: database and journal unwritable (%s)", len(items), error_text(err))

    def _capped(self, n: int) -> None:
        self.loss.journal_failed()
        before = self.stats.capped
        self.stats.capped += n
        self.stats.lost += n
        if before & (before + 1) == 0:  # the first drop, then after 1, 3, 7, 15, ... rows
            log.error("store: journal %s is at its size cap of %d bytes (MIXROUTE_STORE_JOURNAL_MAX_BYTES); "
                      "%d row(s) dropped so far", self.journal.path, self.journal.max_bytes, self.stats.capped)

    def _sync_journal(self) -> None:
        try:
            self.journal.sync()
        except OSError as err:
            log.error("store: journal fsync failed (%s)", error_text(err))
