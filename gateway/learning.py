"""Keeps the outcome memory of this gateway fresh from the shared store.

Every ``learning_refresh_s`` seconds, in a worker thread: derive the observations of new
feedback and retries (:func:`gateway.store.observations.ingest`, idempotent, so every
replica may do it), read the observations within the memory's horizon back, and swap the
router's tallies (:class:`router.learning.memory.OutcomeMemory`). Replicas reading the same
store converge on the same memory within one interval; a request never waits for the
database. A failed refresh keeps the last memory and is retried at the next interval.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta, timezone

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from gateway.runtime import PolicyHolder
from gateway.store.observations import ingest, load
from router.learning.baked import Baked, combine
from router.learning.memory import HORIZON_HALF_LIVES, Tally, tally
from router.policy.learning_config import LearningConfig
from router.predict import UNKNOWN_QUALITY

log = logging.getLogger("mixroute.learning")

#: Feedback is read again this far back on every pass (seconds): rows another replica
#: still holds in its queue, or journaled while the database was down, arrive with their
#: original times.
LATE_S = 600.0
#: Decisions are read again this far back, beyond the retry window, on every pass
#: (seconds): several store flush intervals. A retry whose decisions reach the store later
#: than that (a long database outage) is not observed.
RETRY_LATE_S = 60.0
#: The first pass after a start derives signals of at most this many days back.
BACKFILL_DAYS = 30


class Learner:
    """The refresh loop of one gateway (see the module docstring).

    Args:
        engine: the store's engine (``None``: nothing to learn from; the loop does nothing).
        holder: the policy holder: its current policy's ``learning`` block and its live
            state's :attr:`~router.live.LiveState.outcomes`.
        interval_s: seconds between refreshes.
    """

    def __init__(self, engine: Engine | None, holder: PolicyHolder, interval_s: float) -> None:
        self.engine, self.holder, self.interval_s = engine, holder, interval_s
        self._last: datetime | None = None  # the last successful pass
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        """Load the memory, then refresh it every interval, in the background (a store
        that is down at start does not hold the gateway's start up)."""
        self._task = asyncio.create_task(self._run(), name="mixroute-learning")

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            try:
                await self.refresh()
            except Exception:  # never let one bad pass stop the loop; the memory stays as it was
                log.exception("learning: refresh failed unexpectedly")
            await asyncio.sleep(self.interval_s)

    async def refresh(self) -> bool:
        """One pass; ``False`` (logged, memory kept) when the store cannot be read."""
        holder = self.holder
        baked, shadow = holder.baked, holder.shadow
        found = await self.compute(baked, *([shadow.baked] if shadow is not None else []))
        if found is None:
            return False
        if holder.baked is baked:  # else an adapter swap came in between: its own pass counts
            holder.live.outcomes.replace(found[0])
        if shadow is not None and holder.shadow is shadow:
            shadow.outcomes.replace(found[1])
        return True

    async def compute(self, *corrections: Baked | None) -> list[dict[str, Tally]] | None:
        """Derive new observations, then the memory's tallies with each outcome correction
        of an adapter version (:mod:`router.learning.baked`: its sums, aged, plus the
        observations after its ``trained_until``; ``None``: the observations alone), one
        per correction; ``None`` when the store cannot be read."""
        if self.engine is None or self.holder.current is None:
            return None
        policy = self.holder.current.loaded.policy
        config = policy.learning or LearningConfig()
        now = datetime.now(timezone.utc)
        horizon = timedelta(hours=config.half_life_hours * HORIZON_HALF_LIVES)
        start = now - min(horizon, timedelta(days=BACKFILL_DAYS))
        last = self._last
        feedback_since = last - timedelta(seconds=LATE_S) if last else start
        retries_since = last - timedelta(seconds=config.retry_window_s + RETRY_LATE_S) if last else start
        try:
            await asyncio.to_thread(ingest, self.engine, feedback_since, config.retry_window_s, retries_since)
            rows = await asyncio.to_thread(load, self.engine, now - horizon)
        except SQLAlchemyError as exc:
            log.warning("learning: refresh failed, keeping the last memory (%s)", type(exc).__name__)
            return None
        self._last = now
        priors = {b.name: b.quality if b.quality is not None else UNKNOWN_QUALITY for b in policy.backends}
        out = []
        for baked in corrections or (None,):
            if baked is None:
                out.append(tally(rows, config, now, priors))
                continue
            # Observations up to trained_until are in the correction already.
            later = [r for r in rows if r.created_at > baked.trained_until]
            out.append(combine(baked.aged(now, config.half_life_hours), tally(later, config, now, priors)))
        return out
