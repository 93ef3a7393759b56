"""Hot reload of adapter versions: each gateway polls the versions folder's ``active.json``.

Every ``adapters_poll_s`` seconds the watcher reads the pointer (:mod:`router.learning.versions`);
when it names another version it loads that version off the request path (its own
classifier heads, if it has any, in a worker thread; its outcome correction,
:mod:`router.learning.baked`), computes the outcome memory with the new correction, and
swaps router and memory in one step on the event loop. A request that started before
keeps the router it took (its predictor is closed only after :data:`DRAIN_GRACE_S`), so
nothing in flight is dropped. A version that cannot be loaded (its folder gone, a broken
head) is logged once and the current one stays live.

The same loop keeps the policy's ``learning.shadow`` version loaded beside the live one
(:mod:`router.learning.shadow`) and, every ``guard_every_s``, runs the policy's
``learning.guard`` (:mod:`gateway.guard`): a promoted version whose answers score below
their routes' bars is rolled back (``auto_rollback`` in the versions folder's events).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import time
from datetime import datetime

from gateway.guard import breaches
from gateway.learning import Learner
from gateway.runtime import DRAIN_GRACE_S, PolicyHolder
from router.learning.baked import OUTCOMES_FILE, Baked, BakedError
from router.learning.memory import OutcomeMemory
from router.learning.shadow import Shadow
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
        learner: computes the outcome memory for a version's correction; its store is the
            one the guard reads.
        load_heads: loads a version's own heads (blocking).
        poll_s: seconds between two reads of the pointer.
        guard_every_s: seconds between two passes of the guard.
        name: this gateway, in the events it logs.
    """

    def __init__(self, versions: Versions, holder: PolicyHolder, learner: Learner, load_heads: HeadsLoader,
                 poll_s: float, guard_every_s: float = 30.0, name: str = "gateway") -> None:
        self.versions, self.holder, self.learner = versions, holder, learner
        self.load_heads, self.poll_s, self.guard_every_s, self.name = load_heads, poll_s, guard_every_s, name
        self.shipped_predictor = holder.predictor
        self.heads_version = SHIPPED  # whose heads the holder's adapter predictor is
        self._failed: set[str] = set()  # what failed to load (each logged once)
        self._guarded = 0.0  # monotonic time of the last guard pass
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
                await self.sync_shadow()
                if time.monotonic() - self._guarded >= self.guard_every_s:
                    self._guarded = time.monotonic()
                    await self.guard()
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
            return True
        return await self.switch(active.version, memory)

    async def _load(self, version: str) -> tuple[str, Any, Baked | None]:
        """``(whose heads, predictor, correction)`` of ``version``.

        Raises:
            VersionError, BakedError: the version or its correction cannot be read;
            any error of loading its heads.
        """
        heads_version, folder = await asyncio.to_thread(self.versions.heads, version)
        own = self.versions.folder(version)
        baked = None
        if own is not None and (own / OUTCOMES_FILE).is_file():
            baked = await asyncio.to_thread(Baked.load, own / OUTCOMES_FILE)
        return heads_version, await self._predictor(heads_version, folder), baked

    def _not_loaded(self, what: str, version: str, exc: Exception) -> bool:
        detail = str(exc) if isinstance(exc, (VersionError, BakedError)) else f"{type(exc).__name__}: {exc}"
        return self._fail(f"{what}:{version}", f"adapter version {version!r} not loaded {what}: {detail}")

    async def switch(self, version: str, memory: bool = True) -> bool:
        """Load ``version`` and make it live (see the module docstring)."""
        async with self._lock:
            if version == self.holder.adapter_version:
                return True
            try:
                heads_version, predictor, baked = await self._load(version)
            except Exception as exc:  # VersionError, BakedError, a broken head folder...
                return self._not_loaded(f"(keeping {self.holder.adapter_version!r})", version, exc)
            found = await self.learner.compute(baked) if memory else None
            old, shadow = self.holder.adapter_predictor, self.holder.shadow
            self.holder.shadow = None  # reloaded against the new live version at the next poll
            self.holder.use_adapters(version, predictor, baked)
            if found is not None:
                self.holder.live.outcomes.replace(found[0])
            elif memory:
                log.warning("adapters: the store could not be read; version %s's outcome correction applies from "
                            "the next learning refresh", version)
            self.heads_version = heads_version
            self._failed.clear()
            self._close_later(old, predictor)
            if shadow is not None:
                self._close_later(shadow.predictor, predictor)
            log.info("adapters: version %s live (heads of %s%s)", version, heads_version,
                     ", outcome correction" if baked is not None else "")
            return True

    async def sync_shadow(self) -> None:
        """Load, swap or drop the shadow version the policy names (``learning.shadow``)."""
        current = self.holder.current
        learning = current.loaded.policy.learning if current is not None else None
        want = learning.shadow if learning is not None else None
        if want == self.holder.adapter_version:
            want = None  # the live version itself: nothing to compare
        have = self.holder.shadow
        if want == (have.version if have is not None else None):
            return
        async with self._lock:
            shadow = None
            if want is not None:
                try:
                    heads_version, predictor, baked = await self._load(want)
                except Exception as exc:
                    self._not_loaded("in shadow", want, exc)
                    return
                if heads_version == self.heads_version:
                    predictor = None  # the live prediction serves: no second encoder pass
                shadow = Shadow(want, predictor, OutcomeMemory(baked.offsets if baked is not None else None), baked)
                found = await self.learner.compute(baked)
                if found is not None:
                    shadow.outcomes.replace(found[0])
            self.holder.use_shadow(shadow)
            if have is not None:
                self._close_later(have.predictor, self.holder.adapter_predictor)
            log.info("adapters: shadow version %s", want if want is not None else "off")

    async def guard(self) -> None:
        """One pass of the policy's ``learning.guard`` over the live version (module docstring)."""
        current, engine = self.holder.current, self.learner.engine
        learning = current.loaded.policy.learning if current is not None else None
        config = learning.guard if learning is not None else None
        version = self.holder.adapter_version
        if config is None or engine is None or version == SHIPPED:
            return
        active = await asyncio.to_thread(self.versions.active)
        if active.version != version:
            return
        since = datetime.fromisoformat(active.at) if active.at else None
        routes = [r.name for r in current.loaded.policy.routes]
        found = await asyncio.to_thread(breaches, engine, version, since, routes, config)
        if not found:
            return
        reason = found[0].reason()
        try:
            done = await asyncio.to_thread(self.versions.rollback, expect=version, by=self.name, reason=reason,
                                           event="auto_rollback")
        except (OSError, VersionError) as exc:  # e.g. the folder is mounted read-only here
            self._fail(f"guard:{version}", f"the guard cannot roll version {version!r} back ({reason}): {exc}")
            return
        if done is not None:
            log.warning("adapters: version %s rolled back to %s by the guard: %s", version, done.version, reason)
        await self.sync()

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
        if key not in self._failed:
            log.error("adapters: %s", message)
            self._failed.add(key)
        return False

    def _close_later(self, predictor: Any, keep: Any) -> None:
        """Close ``predictor`` after :data:`DRAIN_GRACE_S`, unless it is ``keep``, the live
        one's or the shipped one (requests that took the old router finish on it)."""
        if predictor is None or predictor is keep or predictor is self.shipped_predictor \
                or predictor is self.holder.adapter_predictor:
            return

        async def close() -> None:
            await asyncio.sleep(DRAIN_GRACE_S)
            closer = getattr(predictor, "close", None)
            if closer is not None:
                await asyncio.to_thread(closer)

        task = asyncio.create_task(close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)
