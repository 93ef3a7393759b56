"""The in-flight count a reload drains: it waits for live calls, ends with them, and gives
up on a call silent for longer than the backend's timeout (a leaked count)."""

from __future__ import annotations

import asyncio
import time

from backends.inflight import InFlight, TrackedStream


async def test_drained_waits_for_a_live_stream_and_gives_up_on_a_silent_call():
    calls = InFlight()

    async def chunks():
        for i in range(5):
            await asyncio.sleep(0.1)
            yield {"i": i}

    stream = TrackedStream(chunks(), calls.begin())
    leaked = calls.begin()  # never touched nor ended

    async def consume():
        async for _ in stream:
            pass
        await stream.aclose()

    started = time.monotonic()
    consumer = asyncio.create_task(consume())
    # Each chunk (0.1 s apart) keeps the stream alive past silent_s=0.3; the leaked call is
    # given up on once silent that long, and the drain ends when the stream does.
    abandoned = await calls.drained(silent_s=0.3)
    assert consumer.done() and abandoned == 1
    assert time.monotonic() - started >= 0.5
    leaked.end()
    assert len(calls) == 0
    assert await calls.drained(silent_s=0.3) == 0
