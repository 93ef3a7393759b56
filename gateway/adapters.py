"""Hot reload of adapter versions: each gateway polls the versions folder's ``active.json``.

Every ``adapters_poll_s`` seconds the watcher reads the pointer (:mod:`router.learning.versions`);
when it names another version it loads that version off the request path (its own
classifier heads, if it has any, in a worker thread; its outcome correction,
:mod:`router.learning.baked`), computes the outcome memory with the new correction, and
swaps router and memory in one step on the event loop. A request that started before
keeps the router it took (its predictor is closed only after :data:`DRAIN_GRACE_S`), so
nothing in flight is dropped. A version that cannot be loaded (its folder gone, a broken
head) is logged once and the current one stays live.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gateway.learning import Learner
from gateway.runtime import DRAIN_GRACE_S, PolicyHolder
from router.learning.baked import OUTCOMES_FILE, Baked, BakedError
from router.learning.versions import SHIPPED, Versions, VersionError

log = logging.getLogger("mixroute.adapters")

#: Loads the classifier heads in a folder into a predictor (blocking); ``None`` when the
#: gateway runs without the classifier.
HeadsLoader = Callable[[Path], Any]


class AdapterWatcher:
    """The polling loop of one gateway (module docstring).

    Args:
        versions: the versions folder.
        holder: the policy holder whose router and memory are swapped.
        learner: computes the outcome memory for a version's correction.
        load_heads: loads a version's own heads (blocking).
        poll_s: seconds between two reads of the pointer.
    """

    def __init__(self, versions: Versions, holder: PolicyHolder, learner: Learner, load_heads: HeadsLoader,
                 poll_s: float) -> None:
        self.versions, self.holder, self.learner = versions, holder, learner
        self.load_heads, self.poll_s = load_heads, poll_s
        self.shipped_predictor = holder.predictor
        self.heads_version = SHIPPED  # whose heads the holder's adapter predictor is
        self._failed: str | None = None  # the pointer value whose load failed (logged once)
        self._task: asyncio.Task | None = None
        self._closing: set[asyncio.Task] = set()
        self._lock = asyncio.Lock()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="mixroute-adapters")

    async def aclose(self) -> None:
        tasks = [t for t in (self._task, *self._closing) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.poll_s)
            try:
                await self.sync()
            except Exception:  # never let one bad pass stop the loop
                log.exception("adapters: poll failed unexpectedly")

    async def sync(self, memory: bool = True) -> bool:
        """Read the pointer and switch to the version it names; ``True`` when that version
        is (now) live, ``False`` when it could not be loaded (the current one stays).
        ``memory=False`` (at start) leaves the outcome memory to the learner's first pass,
        which runs in the background, so a store that is down does not hold the start up."""
        try:
            active = await asyncio.to_thread(self.versions.active)
        except VersionError as exc:
            return self._fail(str(exc), str(exc))
        if active.version == self.holder.adapter_version:
            self._failed = None
            return True
        return await self.switch(active.version, memory)

    async def switch(self, version: str, memory: bool = True) -> bool:
        """Load ``version`` and make it live (see the module docstring)."""
        async with self._lock:
            if version == self.holder.adapter_version:
                return True
            try:
                heads_version, folder = await asyncio.to_thread(self.versions.heads, version)
                own = self.versions.folder(version)
                baked = None
                if own is not None and (own / OUTCOMES_FILE).is_file():
                    baked = await asyncio.to_thread(Baked.load, own / OUTCOMES_FILE)
                predictor = await self._predictor(heads_version, folder)
            except (VersionError, BakedError) as exc:
                return self._fail(version, f"adapter version {version!r} not loaded, keeping "
                                           f"{self.holder.adapter_version!r}: {exc}")
            except Exception as exc:  # a broken head folder: AdapterError, a torch error...
                return self._fail(version, f"adapter version {version!r} not loaded, keeping "
                                           f"{self.holder.adapter_version!r}: heads of {heads_version!r}: "
                                           f"{type(exc).__name__}: {exc}")
            tallies = await self.learner.compute(baked) if memory else None
            old = self.holder.adapter_predictor
            self.holder.use_adapters(version, predictor, baked)
            if tallies is not None:
                self.holder.live.outcomes.replace(tallies)
            elif memory:
                log.warning("adapters: the store could not be read; version %s's outcome correction applies from "
                            "the next learning refresh", version)
            self.heads_version, self._failed = heads_version, None
            if old is not predictor and old is not self.shipped_predictor:
                self._close_later(old)
            log.info("adapters: version %s live (heads of %s%s)", version, heads_version,
                     ", outcome correction" if baked is not None else "")
            return True

    async def _predictor(self, heads_version: str, folder: Path | None) -> Any:
        if heads_version == self.heads_version:
            return self.holder.adapter_predictor
        if heads_version == SHIPPED or folder is None:
            return self.shipped_predictor
        if self.shipped_predictor is None:  # the gateway routes without the classifier
            log.info("adapters: the classifier is off; heads of version %s are not loaded", heads_version)
            return None
        return await asyncio.to_thread(self.load_heads, folder)

    def _fail(self, key: str, message: str) -> bool:
        if self._failed != key:
            log.error("adapters: %s", message)
            self._failed = key
        return False

    def _close_later(self, predictor: Any) -> None:
        async def close() -> None:
            await asyncio.sleep(DRAIN_GRACE_S)  # requests that took the old router finish on it
            closer = getattr(predictor, "close", None)
            if closer is not None:
                await asyncio.to_thread(closer)

        task = asyncio.create_task(close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)
