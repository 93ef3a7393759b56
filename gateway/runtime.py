"""The live routing runtime: policy -> router + started backends, swapped atomically on
hot reload. A request takes one :class:`Runtime` reference at its start and uses it to
the end, so a reload never changes the policy under an in-flight request.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace
from pathlib import Path

from backends.base import Backend
from backends.data import DataFormatError
from backends.registry import build_backend
from router.classify.labels import quality_notes
from router.engine import Router
from router.learning.baked import Baked
from router.learning.shadow import Shadow
from router.learning.versions import SHIPPED
from router.live import LiveState
from router.policy import DEMO_POLICY, LoadedPolicy, PolicyError, load_policy
from router.policy.loader import check_replay_data
from router.policy.models import pricing_notes
from router.predict import Predictor

log = logging.getLogger("mixroute.policy")

#: Seconds after a reload before the old runtime's replaced backends are drained: a request
#: that took the old runtime just before the reload (still reading its body, or deciding)
#: reaches dispatch, and is counted, within it. Then each backend is closed once its last
#: call has ended (:meth:`Runtime.aclose`), however long that takes.
DRAIN_GRACE_S = 30.0


@dataclass
class Runtime:
    """One policy's router and backends."""

    loaded: LoadedPolicy
    router: Router
    backends: dict[str, Backend]
    #: Request headers the policy's ``when_header`` rules name (lower case): passed to the
    #: rules with the ``x-mixroute-*`` headers.
    rule_headers: frozenset[str] = frozenset()

    @classmethod
    async def build(cls, loaded: LoadedPolicy, predictor: Predictor | None, live: LiveState | None = None,
                    shared: tuple[str, str, str] | None = None,
                    previous: "Runtime | None" = None, adapter_version: str | None = None,
                    shadow: Shadow | None = None) -> "Runtime":
        """Build and start the backends of ``loaded``.

        Args:
            shared: ``(redis_url, prefix, gateway_id)`` to share pool state between gateway
                replicas (backends that support it: ``vllm``).
            previous: the runtime being replaced (a reload): its backends whose configuration
                is unchanged are kept as they are, running, so that a vLLM pool keeps its
                prefix-affinity table, replica health and metrics across an edit elsewhere in
                the policy (a reload used to scatter every session's prefix).
        """
        kept = previous.backends if previous is not None else {}
        backends: dict[str, Backend] = {}
        for config in loaded.policy.backends:
            old = kept.get(config.name)
            if old is not None and old.config == config:
                backends[config.name] = old
                continue
            backend = backends[config.name] = build_backend(config)
            if shared is not None and hasattr(backend, "share_state"):
                backend.share_state(*shared)
            await backend.start()
        return cls(loaded=loaded, router=Router(loaded, predictor, live, adapter_version, shadow), backends=backends,
                   rule_headers=frozenset(r.when_header.lower() for r in loaded.policy.rules if r.when_header))

    def with_adapters(self, predictor: Predictor | None, version: str, shadow: Shadow | None = None) -> "Runtime":
        """The same policy and running backends with another adapter version's router (a
        hot swap of the classifier heads: requests that took this runtime finish on it)."""
        return replace(self, router=Router(self.loaded, predictor, self.router.live, version, shadow))

    async def aclose(self, keep: "Runtime | None" = None, drain: bool = False) -> None:
        """Close the backends, except those ``keep`` (the runtime that replaced this one) uses.

        Args:
            drain: first wait, for each backend, until its calls in flight have ended (a
                reload must not break them); a call silent for longer than the backend's
                ``timeout_s`` is given up on, since that timeout would have ended it.
        """
        still_used = {id(b) for b in keep.backends.values()} if keep is not None else set()
        retired = [b for b in self.backends.values() if id(b) not in still_used]
        await asyncio.gather(*(_close(b, drain) for b in retired))


async def _close(backend: Backend, drain: bool) -> None:
    if drain:
        waited = len(backend.in_flight)
        abandoned = await backend.in_flight.drained(silent_s=backend.config.timeout_s)
        if abandoned:
            log.warning("backend %s of the replaced policy closed with %d silent call(s) still counted",
                        backend.name, abandoned)
        elif waited:
            log.info("backend %s of the replaced policy closed after its last call in flight", backend.name)
    try:
        await backend.aclose()
    except Exception:  # closing must not stop the others
        log.exception("closing backend %s failed", backend.name)


class PolicyHolder:
    """Holds the current runtime; loads, hot-reloads and closes it.

    Args:
        path: policy file (``None``: the bundled demo policy, not watched).
        predictor: shared by every runtime (the classifier is loaded once).
        on_loaded: called with each newly applied :class:`LoadedPolicy` (store it).
        shared: ``(redis_url, prefix, gateway_id)``: share pool state between replicas.
    """

    def __init__(self, path: Path | None, predictor: Predictor | None, on_loaded=None,
                 shared: tuple[str, str, str] | None = None):
        self.path = Path(path) if path else Path(DEMO_POLICY)
        self.is_demo = path is None
        self.predictor = predictor
        self.on_loaded = on_loaded
        self.live = LiveState()
        self.shared = shared
        self.current: Runtime | None = None
        #: The adapter version in force, its predictor (``predictor`` for the shipped heads)
        #: and its outcome correction (:mod:`gateway.adapters` swaps them).
        self.adapter_version = SHIPPED
        self.adapter_predictor: Predictor | None = predictor
        self.baked: Baked | None = None
        #: The version decided in shadow beside the live one (the policy's ``learning.shadow``).
        self.shadow: Shadow | None = None
        self._watch_task: asyncio.Task | None = None
        self._closing: set[asyncio.Task] = set()

    async def load(self) -> Runtime:
        """Load the policy file and make it current.

        Raises:
            router.policy.PolicyError: the file is invalid (the current runtime stays).
        """
        loaded = await asyncio.to_thread(load_policy, self.path)
        if self.current is not None and loaded.hash == self.current.loaded.hash:
            return self.current
        await asyncio.to_thread(check_replay_data, loaded)  # at the policy's line, not the data file's
        version, shadow = self.adapter_version, self.shadow
        runtime = await Runtime.build(loaded, self.adapter_predictor, self.live, self.shared, previous=self.current,
                                      adapter_version=version, shadow=shadow)
        if self.adapter_version != version or self.shadow is not shadow:  # swapped while the backends started
            runtime = runtime.with_adapters(self.adapter_predictor, self.adapter_version, self.shadow)
        old, self.current = self.current, runtime
        self.live.keep_route_targets({r.name for r in loaded.policy.routes
                                      if r.quality_bar.route_target is not None})
        if self.on_loaded:
            self.on_loaded(loaded)
        if old is not None:
            task = asyncio.create_task(self._close_later(old, runtime))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
        log.info("policy %s applied (hash %s)", self.path, loaded.hash)
        labels = getattr(self.predictor, "quality_labels", [])  # the classifier's; none on priors
        for note in pricing_notes(loaded.policy) + quality_notes(loaded.policy, labels):
            log.warning("policy %s: %s", self.path, note)
        return runtime

    def use_adapters(self, version: str, predictor: Predictor | None, baked: "Baked | None") -> None:
        """Make ``version`` (its predictor and outcome correction) the one new requests use."""
        self.adapter_version, self.adapter_predictor, self.baked = version, predictor, baked
        self.live.outcomes.offsets = baked.offsets if baked is not None else {}
        if self.current is not None:
            self.current = self.current.with_adapters(predictor, version, self.shadow)

    def use_shadow(self, shadow: Shadow | None) -> None:
        """Decide ``shadow`` beside every routed request (``None``: stop)."""
        self.shadow = shadow
        if self.current is not None:
            self.current = self.current.with_adapters(self.adapter_predictor, self.adapter_version, shadow)

    async def reload(self) -> bool:
        """Try to apply the file again; on error log it and keep the old policy. Returns success."""
        keep = self.current.loaded.hash if self.current else None
        try:
            await self.load()
            return True
        except (PolicyError, DataFormatError) as exc:  # a replay backend's data fails when it is loaded
            log.error("policy reload rejected, keeping hash %s:\n%s", keep, exc)
        except Exception:  # never let one bad edit stop the watcher: later edits must still apply
            log.exception("policy reload failed unexpectedly, keeping hash %s", keep)
        return False

    def watch(self) -> None:
        """Start watching the policy file for changes (no-op for the demo policy)."""
        if not self.is_demo and self._watch_task is None:
            self._watch_task = asyncio.create_task(self._watch())

    async def _watch(self) -> None:
        from watchfiles import awatch

        # Watch the folder: editors replace files by rename, which a file watch misses.
        while True:
            try:
                # Only the policy file's own events pass the filter: other files in the folder
                # (the store's SQLite WAL, a log file the gateway itself writes) would wake the
                # watcher, and watchfiles' INFO line per wake-up would then feed a log file
                # next to the policy forever.
                async for _ in awatch(self.path.parent, debounce=200, step=50,
                                      watch_filter=lambda _change, p: Path(p).name == self.path.name):
                    await self.reload()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("policy watcher failed; restarting it in 1 s")
                await asyncio.sleep(1.0)

    async def _close_later(self, runtime: Runtime, successor: Runtime) -> None:
        # A backend object is shared only by consecutive runtimes, so each is closed once: by
        # the last runtime holding it, whose successor no longer does.
        try:
            await asyncio.sleep(DRAIN_GRACE_S)
            await runtime.aclose(keep=successor, drain=True)
        except asyncio.CancelledError:  # shutting down: close what is left now
            await runtime.aclose(keep=successor)
            raise

    async def aclose(self) -> None:
        if self._watch_task:
            self._watch_task.cancel()
        closing = list(self._closing)
        for task in closing:
            task.cancel()
        await asyncio.gather(*closing, return_exceptions=True)  # each closes its old backends
        if self.current:
            await self.current.aclose()
