"""Dynamic micro-batching of concurrent calls into one worker thread.

Concurrent ``await batcher.submit(text)`` calls on one event loop run as ONE call of
``fn(texts)`` in a single worker thread, so the event loop never runs the encoder and one
encoder pass serves many requests. Batches run one at a time (the worker is
single-threaded; torch parallelises inside a batch). When a batch starts:

- the worker is idle: ``max_wait_ms`` after the first waiting text (texts arriving meanwhile
  join it), or at once when ``max_batch`` are waiting;
- the worker is busy: never while it is; every text arriving meanwhile waits, and the
  moment the running batch ends the waiting texts (up to ``max_batch``) start as the next
  batch. A busy period thus merges its arrivals into one batch instead of queueing one
  small batch per timer (continuous batching with a single worker, as inference servers
  batch requests that queue behind the running step).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any


class MicroBatcher:
    """Collects concurrent requests into batches for ``fn``.

    Args:
        fn: ``fn(texts) -> results`` (same length, same order), run in the worker thread.
        max_batch: most texts per ``fn`` call (>= 1).
        max_wait_ms: longest the first text waits for company while the worker is idle
            (ms; 0: start at the next event-loop turn). Texts that arrive while a batch
            runs wait for it instead, then start together.

    Attributes:
        batch_sizes: sizes of the last 1,000 batches (for metrics and tests).
        on_batch: optional ``callable(latency_s, batch_size)`` called (in the worker
            thread) after each batch; the gateway feeds its classifier metrics with it.
    """

    def __init__(self, fn: Callable[[list[str]], Sequence[Any]], *, max_batch: int = 32, max_wait_ms: float = 0.0):
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        self.fn = fn
        self.max_batch = max_batch
        self.max_wait_s = max(0.0, max_wait_ms) / 1000.0
        self.batch_sizes: deque[int] = deque(maxlen=1000)
        self.on_batch: Callable[[float, int], None] | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mixroute-classifier")
        self._pending: dict[asyncio.AbstractEventLoop, list[tuple[str, asyncio.Future]]] = {}
        self._timers: dict[asyncio.AbstractEventLoop, asyncio.TimerHandle] = {}
        self._busy: set[asyncio.AbstractEventLoop] = set()  # loops with a batch in the worker

    async def submit(self, text: str) -> Any:
        """The result of ``fn`` for ``text``, computed in some batch.

        Raises:
            Exception: whatever ``fn`` raised for the batch holding ``text``.
        """
        loop = asyncio.get_running_loop()
        fut: asyncio.Future = loop.create_future()
        pending = self._pending.setdefault(loop, [])
        pending.append((text, fut))
        if loop in self._busy:
            pass  # starts when the running batch ends (_done)
        elif len(pending) >= self.max_batch:
            self._flush(loop)
        elif loop not in self._timers:
            self._timers[loop] = loop.call_later(self.max_wait_s, self._flush, loop)
        return await fut

    def _flush(self, loop: asyncio.AbstractEventLoop) -> None:
        timer = self._timers.pop(loop, None)
        if timer is not None:
            timer.cancel()
        if loop in self._busy:
            return
        waiting = [(t, f) for t, f in self._pending.pop(loop, []) if not f.done()]  # drop cancelled callers
        batch, rest = waiting[: self.max_batch], waiting[self.max_batch:]
        if rest:
            self._pending[loop] = rest
        if not batch:
            return
        self._busy.add(loop)
        self.batch_sizes.append(len(batch))
        work = loop.run_in_executor(self._executor, self._timed, [t for t, _ in batch])
        work.add_done_callback(lambda done: self._done(loop, batch, done))

    def _done(self, loop: asyncio.AbstractEventLoop, batch: list[tuple[str, asyncio.Future]],
              done: asyncio.Future) -> None:
        self._busy.discard(loop)
        self._deliver(batch, done)
        if self._pending.get(loop):
            self._flush(loop)  # what queued behind the batch starts now, without another wait

    def _timed(self, texts: list[str]) -> Sequence[Any]:
        start = time.perf_counter()
        out = self.fn(texts)
        if self.on_batch is not None:
            try:
                self.on_batch(time.perf_counter() - start, len(texts))
            except Exception:  # metrics must never fail a classification
                pass
        return out

    @staticmethod
    def _deliver(batch: list[tuple[str, asyncio.Future]], done: asyncio.Future) -> None:
        exc = None if done.cancelled() else done.exception()
        if done.cancelled() or exc is not None:
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(exc or asyncio.CancelledError())
            return
        for (_, fut), result in zip(batch, done.result()):
            if not fut.done():
                fut.set_result(result)

    def close(self) -> None:
        """Stop the worker thread (waits for the batch in flight)."""
        self._executor.shutdown(wait=True)
