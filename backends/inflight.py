"""The calls in flight on one backend object, so that a policy reload closes a replaced
backend (its HTTP session, its pool) only after its last call has ended, however long a
stream runs, instead of after a fixed grace that cut long streams.

The dispatcher opens a :class:`Call` per attempt (:meth:`InFlight.begin`), touches it with
each streamed chunk and ends it when the answer or the stream ends; :meth:`InFlight.drained`
waits for the calls to end. A call that stays silent longer than the backend's own timeout
would have been ended by that timeout, so it is not waited for (a count leaked by a stream
whose body was never iterated, say, must not keep a backend open for ever).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator

#: Seconds between two looks at the calls while draining.
POLL_S = 0.1


class InFlight:
    """The calls in flight on one backend object."""

    def __init__(self) -> None:
        self._last: dict[int, float] = {}  # call id -> monotonic time of its last sign of life
        self._ids = itertools.count()

    def __len__(self) -> int:
        return len(self._last)

    def begin(self) -> Call:
        """Count a new call in flight until :meth:`Call.end`."""
        cid = next(self._ids)
        self._last[cid] = time.monotonic()
        return Call(self, cid)

    async def drained(self, silent_s: float) -> int:
        """Return once no call is in flight, or every call left has been silent (no chunk, no
        end) for ``silent_s`` seconds.

        Returns:
            The number of silent calls given up on (0 when every call ended).
        """
        while True:
            now = time.monotonic()
            if all(now - last >= silent_s for last in self._last.values()):
                return len(self._last)
            await asyncio.sleep(POLL_S)


class Call:
    """One call counted in an :class:`InFlight`."""

    __slots__ = ("_calls", "_cid")

    def __init__(self, calls: InFlight, cid: int) -> None:
        self._calls, self._cid = calls, cid

    def touch(self) -> None:
        """The call is alive (a chunk arrived)."""
        if self._cid in self._calls._last:
            self._calls._last[self._cid] = time.monotonic()

    def end(self) -> None:
        """The call ended (idempotent)."""
        self._calls._last.pop(self._cid, None)


class TrackedStream:
    """A backend's chunk iterator that keeps its :class:`Call` alive with each chunk and
    ends it when the stream ends or is closed."""

    def __init__(self, chunks: AsyncIterator[dict], call: Call) -> None:
        self._chunks, self._call = chunks, call

    def __aiter__(self) -> TrackedStream:
        return self

    async def __anext__(self) -> dict:
        try:
            chunk = await self._chunks.__anext__()
        except BaseException:
            self._call.end()
            raise
        self._call.touch()
        return chunk

    async def aclose(self) -> None:
        try:
            await self._chunks.aclose()
        finally:
            self._call.end()
