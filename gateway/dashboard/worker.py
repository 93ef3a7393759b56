"""Dashboard summaries computed in a separate process.

A summary reads up to :data:`gateway.dashboard.queries.MAX_ROWS` decision/outcome rows and
aggregates them in Python. In a thread of the gateway's own process that work holds the
GIL for seconds on a large store, and every request in flight waits for it. Here one worker process, spawned on first use with its own engine per database URL,
computes them; concurrent summaries queue for it, and the gateway's event loop only waits
for the answer.

Errors: a database error in the worker comes back as :class:`StoreDown` (SQLAlchemy's own
exceptions do not always survive pickling); a worker that died is replaced on the next call.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

_lock = threading.Lock()
_pool: ProcessPoolExecutor | None = None
_engines: dict[str, Any] = {}  # in the worker: database URL -> engine


class StoreDown(Exception):
    """The worker could not query the store (the message says why)."""


def _summary(url: str, *args: Any) -> dict[str, Any]:
    """Runs in the worker process."""
    from sqlalchemy.exc import SQLAlchemyError

    from gateway.dashboard import queries
    from gateway.store.db import make_engine

    try:
        engine = _engines.get(url)
        if engine is None:
            engine = _engines[url] = make_engine(url)
        return queries.summary(engine, *args)
    except SQLAlchemyError as exc:
        raise StoreDown(type(exc).__name__) from None


def _executor() -> ProcessPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
        return _pool


async def summary(url: str, *args: Any) -> dict[str, Any]:
    """:func:`gateway.dashboard.queries.summary` for the database at ``url`` (a URL with its
    password: it only crosses to the worker), computed in the worker process.

    Raises:
        StoreDown: the store could not be queried.
    """
    global _pool
    loop = asyncio.get_running_loop()
    try:
        return await loop.run_in_executor(_executor(), _summary, url, *args)
    except BrokenProcessPool:  # the worker died (killed, out of memory): start a new one once
        with _lock:
            _pool = None
        return await loop.run_in_executor(_executor(), _summary, url, *args)


def shutdown(timeout_s: float = 2.0) -> None:
    """Stop the worker (the gateway's shutdown): ask it to exit, wait up to ``timeout_s``
    seconds, then terminate it. ``shutdown(wait=False)`` alone left it running: the gateway
    process exited before the pool's manager thread told the worker to stop, and the
    orphaned worker kept its memory and database connections."""
    global _pool
    with _lock:
        pool, _pool = _pool, None
    if pool is None:
        return
    processes = list((getattr(pool, "_processes", None) or {}).values())  # before shutdown clears it
    pool.shutdown(wait=False, cancel_futures=True)
    deadline = time.monotonic() + timeout_s
    for process in processes:
        process.join(max(deadline - time.monotonic(), 0.0))
        if process.is_alive():
            process.terminate()
            process.join(1.0)
