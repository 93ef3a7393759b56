"""Live backend state and the TTFT prediction used against a route's SLO.

For each backend the gateway keeps its in-flight requests and exponentially weighted
moving averages (EWMA, weight :data:`ALPHA` on the newest sample) of observed TTFT and
total latency. The predicted TTFT of a new request is

    TTFT_pred = TTFT_ewma + queued x latency_ewma / max_concurrency

where ``queued = max(0, in_flight - max_concurrency, waiting)`` is the number of requests
ahead of it that cannot start yet (``waiting`` is a pool's reported queue, e.g. vLLM's
``vllm:num_requests_waiting``), drained ``max_concurrency`` at a time, one mean latency
per round (Little's law for a saturated server). A backend with no observation yet has no
prediction and is never skipped for its SLO. All times in seconds.

It also remembers which stable-prefix hashes each backend served recently, so the cost
model can price the expected prefix-cache hit at the cached-input rate
(:meth:`LiveState.prefix_warm`).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass

from backends.config import BackendConfig
from router.aggregate import DEFAULT_WINDOW, RouteTarget
from router.learning.memory import OutcomeMemory
from router.policy.quality_bar import DEFAULT_ALLOCATION

ALPHA = 0.2
#: Seconds a prefix is assumed to stay in a backend's prefix cache after it was served:
#: providers keep cached prefixes for 5-10 minutes of inactivity (OpenAI, Anthropic's
#: default 5-minute TTL); 300 s is the conservative end. vLLM keeps them until evicted.
PREFIX_TTL_S = 300.0
#: Prefix hashes remembered per backend.
PREFIX_MEMORY = 10_000


@dataclass
class _State:
    in_flight: int = 0
    waiting: int = 0
    ttft_ewma: float | None = None
    latency_ewma: float | None = None


def _ewma(old: float | None, new: float) -> float:
    return new if old is None else (1 - ALPHA) * old + ALPHA * new


class LiveState:
    """In-process live state of every backend (one per gateway process, kept across policy reloads)."""

    def __init__(self) -> None:
        self._s: dict[str, _State] = {}
        self._prefixes: dict[str, OrderedDict[str, float]] = {}
        self._targets: dict[str, tuple[tuple, RouteTarget]] = {}
        self._sessions: dict[str, list[int]] = {}  # route -> [sessions opened, session turns]
        #: Own-traffic outcome tallies, refreshed from the store (:mod:`router.learning.memory`).
        self.outcomes = OutcomeMemory()

    def route_target(self, route: str, target: float, window: int | None = None,
                     backends: tuple[str, ...] = (), z: float = 0.0,
                     allocation: str = DEFAULT_ALLOCATION) -> RouteTarget:
        """The ``route_target`` controller of ``route`` (:mod:`router.aggregate`). It is kept
        across policy reloads while the route's target, window, candidate backends,
        ``uncertainty_z`` (``z``: the window holds qualities lowered by it) and
        ``allocation`` stay the same; a change starts a new, empty one.

        Raises:
            ValueError: an unknown ``allocation``."""
        key = (float(target), window or DEFAULT_WINDOW, tuple(backends), float(z), allocation)
        found = self._targets.get(route)
        if found is None or found[0] != key:
            found = self._targets[route] = (key, RouteTarget(key[0], key[1], allocation))
        return found[1]

    def keep_route_targets(self, routes: set[str]) -> None:
        """Drop the ``route_target`` controllers of every route not in ``routes`` (called on a
        policy reload with the routes that still have such a bar: a deleted route's window
        would otherwise stay in memory, and a route that gets the bar back starts afresh)."""
        for route in [r for r in self._targets if r not in routes]:
            del self._targets[route]

    def saw_prefix(self, backend: str, prefix_hash: str, now: float | None = None) -> None:
        """Record that ``backend`` served a request with this stable-prefix hash."""
        seen = self._prefixes.setdefault(backend, OrderedDict())
        seen[prefix_hash] = now if now is not None else time.monotonic()
        seen.move_to_end(prefix_hash)
        while len(seen) > PREFIX_MEMORY:
            seen.popitem(last=False)

    def prefix_warm(self, backend: str, prefix_hash: str, now: float | None = None) -> bool:
        """Whether ``backend`` served this prefix within :data:`PREFIX_TTL_S` (expected cache hit)."""
        at = self._prefixes.get(backend, {}).get(prefix_hash)
        return at is not None and (now if now is not None else time.monotonic()) - at <= PREFIX_TTL_S

    def _get(self, backend: str) -> _State:
        return self._s.setdefault(backend, _State())

    def started(self, backend: str) -> None:
        self._get(backend).in_flight += 1

    def finished(self, backend: str, *, ttft_s: float | None, latency_s: float | None) -> None:
        """Count the end of a request; failed attempts pass ``None`` times (not averaged)."""
        s = self._get(backend)
        s.in_flight = max(0, s.in_flight - 1)
        if ttft_s is not None:
            s.ttft_ewma = _ewma(s.ttft_ewma, ttft_s)
        if latency_s is not None:
            s.latency_ewma = _ewma(s.latency_ewma, latency_s)

    def session_turn(self, route: str, first: bool) -> None:
        """Count a decided turn of a session on ``route`` (``first``: the session's first)."""
        counts = self._sessions.setdefault(route, [0, 0])
        counts[0] += first
        counts[1] += 1

    def session_turns(self, route: str) -> float | None:
        """Turns per session on ``route`` so far (sessions still going count the turns they
        have had, so the figure errs low), ``None`` before its first session."""
        counts = self._sessions.get(route)
        return counts[1] / counts[0] if counts and counts[0] else None

    def set_waiting(self, backend: str, waiting: int) -> None:
        """Record a pool's own reported queue depth (requests waiting)."""
        self._get(backend).waiting = max(0, waiting)

    def in_flight(self, backend: str) -> int:
        return self._get(backend).in_flight

    def predicted_ttft(self, config: BackendConfig) -> float | None:
        """Predicted TTFT in seconds (formula in the module docstring), ``None`` if unknown."""
        s = self._s.get(config.name)
        if s is None or s.ttft_ewma is None:
            return None
        cap = config.max_concurrency
        queued = max(s.waiting, s.in_flight - cap if cap else 0, 0)
        if not queued or not cap or s.latency_ewma is None:
            return s.ttft_ewma
        return s.ttft_ewma + queued * s.latency_ewma / cap
