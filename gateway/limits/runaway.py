"""Runaway cost: each tenant's and each route's spend rate against its own recent baseline
(the policy's ``runaway:`` block, :class:`router.policy.runaway_config.RunawayConfig`).

Per watched subject (``tenant`` or ``route`` and a name) this keeps the spend of the last
``window_s`` seconds in ten sub-window slots (a sliding window of fixed size), and an EWMA of
the spend per whole window, ``b <- alpha * x + (1 - alpha) * b`` with ``alpha = 2 / (span + 1)``
(the span form of pandas' ``ewm``); a run of idle windows decays it by ``(1 - alpha) ** n``.
It fires when the short-window rate exceeds ``factor`` x the baseline rate (and the
configured floor), once the subject has ``warmup_windows`` of history. While fired the
baseline does not learn, so a runaway never becomes its own baseline.

Each gateway process watches the traffic it serves: behind a load balancer every replica
sees its share of both the rate and the baseline, so their ratio is the same. Throttling
goes through the shared limiter (Redis when configured), so the stated rate holds across
replicas: :meth:`RunawayCheck.throttles` gives the extra :class:`~gateway.limits.base.Limits`.

Errors::

    SpendThrottled  429 rate_limit_error  spend_rate_throttled  (retry-after: window end)
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from datetime import datetime, timezone

from gateway.limits.base import Limits, RateLimitExceeded
from router.policy.runaway_config import RunawayConfig

log = logging.getLogger("mixroute.runaway")

#: The limiter subject of a throttle: ``runaway:<scope>:<name>``.
RUNAWAY_SUBJECT = "runaway:"
SLOTS = 10
MAX_SUBJECTS = 10_000
MAX_EVENTS = 100


class SpendThrottled(RateLimitExceeded):
    """A tenant's or route's spend rate ran away and the policy throttles it."""

    code = "spend_rate_throttled"


@dataclass
class _Track:
    """One subject's spend history (times from the watch's monotonic clock)."""

    window: int                       # index of the baseline window in progress
    window_usd: float = 0.0
    slots: deque = field(default_factory=deque)   # (slot index, USD), newest last
    baseline: float | None = None     # EWMA of USD per window
    windows: int = 0                  # completed windows of history
    active: bool = False
    last_above: float = 0.0


@dataclass(frozen=True)
class RunawayEvent:
    """A subject's spend rate fired (``action``: ``alert`` or ``throttle``) or recovered (``clear``)."""

    at: datetime
    scope: str
    name: str
    rate_usd_per_min: float
    baseline_usd_per_min: float
    action: str

    def as_dict(self) -> dict:
        return {"at": self.at.isoformat(timespec="seconds").replace("+00:00", "Z"), "scope": self.scope,
                "name": self.name, "rate_usd_per_min": self.rate_usd_per_min,
                "baseline_usd_per_min": self.baseline_usd_per_min, "action": self.action}


class RunawayWatch:
    """The spend tracks of one gateway process, kept across policy reloads (they restart
    when the ``runaway`` block changes).

    Args:
        clock: monotonic seconds (tests pass their own).
    """

    def __init__(self, clock=time.monotonic) -> None:
        self.clock = clock
        self.config: RunawayConfig | None = None
        self._tracks: OrderedDict[tuple[str, str], _Track] = OrderedDict()
        self._events: deque[RunawayEvent] = deque(maxlen=MAX_EVENTS)
        self.fired: dict[tuple[str, str, str], int] = {}   # (scope, name, action) -> times fired

    def check(self, config: RunawayConfig) -> RunawayCheck | None:
        """The request path's view under ``config`` (``None`` when the action is ``off``)."""
        if config is not self.config and config != self.config:
            self.config = config
            self._tracks.clear()
        return None if config.action == "off" else RunawayCheck(self, config)

    def observe(self, scope: str, name: str, usd: float) -> None:
        """Add ``usd`` spent by ``(scope, name)`` now, and fire if its rate ran away."""
        cfg, now = self.config, self.clock()
        if cfg is None or cfg.action == "off":
            return
        track = self._track(scope, name, now)
        track.window_usd += usd
        slot = int(now // (cfg.window_s / SLOTS))
        if track.slots and track.slots[-1][0] == slot:
            track.slots[-1] = (slot, track.slots[-1][1] + usd)
        else:
            track.slots.append((slot, usd))
        self._evaluate(scope, name, track, now)

    def active(self, scope: str, name: str) -> bool:
        """Whether ``(scope, name)`` is fired now (re-evaluated: a rate that fell back clears)."""
        key = (scope, name)
        track = self._tracks.get(key)
        if track is None or not track.active:
            return False
        now = self.clock()
        self._advance(track, now)
        self._evaluate(scope, name, track, now)
        return track.active

    def rates(self) -> list[tuple[str, str, float, float | None, bool]]:
        """``(scope, name, rate, baseline, active)`` per subject, rates in USD per minute.
        Read-only, so that the metrics scrape may call it from its worker thread."""
        cfg, now = self.config, self.clock()
        if cfg is None:
            return []
        oldest = int(now // (cfg.window_s / SLOTS)) - SLOTS + 1
        out = []
        for (scope, name), track in list(self._tracks.items()):
            rate = sum(usd for slot, usd in list(track.slots) if slot >= oldest) * 60.0 / cfg.window_s
            out.append((scope, name, rate, self._baseline_rate(track), track.active))
        return out

    def recent_events(self) -> list[dict]:
        """The latest events, newest first (at most :data:`MAX_EVENTS`)."""
        return [e.as_dict() for e in reversed(self._events)]

    # -- internals ----------------------------------------------------------------------

    def _track(self, scope: str, name: str, now: float) -> _Track:
        key = (scope, name)
        track = self._tracks.get(key)
        if track is None:
            track = self._tracks[key] = _Track(window=int(now // self.config.window_s))
            if len(self._tracks) > MAX_SUBJECTS:
                self._tracks.popitem(last=False)
        else:
            self._tracks.move_to_end(key)
            self._advance(track, now)
        return track

    def _advance(self, track: _Track, now: float) -> None:
        """Fold the windows that ended into the baseline (unless fired) and drop old slots."""
        cfg = self.config
        window = int(now // cfg.window_s)
        if window > track.window:
            if not track.active:
                alpha = 2.0 / (cfg.baseline_windows + 1)
                idle = window - track.window - 1
                x, b = track.window_usd, track.baseline
                b = x if b is None else alpha * x + (1 - alpha) * b
                track.baseline = b * (1 - alpha) ** min(idle, 10_000)
                track.windows += window - track.window
            track.window, track.window_usd = window, 0.0
        oldest = int(now // (cfg.window_s / SLOTS)) - SLOTS + 1
        while track.slots and track.slots[0][0] < oldest:
            track.slots.popleft()

    def _rate(self, track: _Track, now: float) -> float:
        return sum(usd for _, usd in track.slots) * 60.0 / self.config.window_s

    def _baseline_rate(self, track: _Track) -> float | None:
        return None if track.baseline is None else track.baseline * 60.0 / self.config.window_s

    def _evaluate(self, scope: str, name: str, track: _Track, now: float) -> None:
        cfg = self.config
        rate, base = self._rate(track, now), self._baseline_rate(track)
        above = (track.windows >= cfg.warmup_windows and base is not None and rate > cfg.factor * base
                 and rate >= cfg.min_usd_per_min)
        if above:
            track.last_above = now
            if not track.active:
                track.active = True
                self._event(scope, name, rate, base, cfg.action)
        elif track.active and now - track.last_above >= cfg.hold_s:
            track.active = False
            self._event(scope, name, rate, base or 0.0, "clear")

    def _event(self, scope: str, name: str, rate: float, base: float, action: str) -> None:
        self._events.append(RunawayEvent(datetime.now(timezone.utc), scope, name, rate, base, action))
        key = (scope, name, action)
        self.fired[key] = self.fired.get(key, 0) + 1
        if action == "clear":
            log.warning("runaway spend over: %s %r back to %.6f USD/min (baseline %.6f USD/min)", scope, name,
                        rate, base)
            return
        cfg = self.config
        then = f"throttled to {cfg.throttle_rpm} requests/min" if action == "throttle" else "alert only"
        log.warning("runaway spend: %s %r at %.6f USD/min, %.1fx its baseline of %.6f USD/min (threshold %gx); %s",
                    scope, name, rate, rate / base if base else float("inf"), base, cfg.factor, then)


@dataclass(frozen=True)
class RunawayCheck:
    """The runaway check of one request under the live policy's ``runaway`` block."""

    watch: RunawayWatch
    config: RunawayConfig

    def subjects(self, tenant: str | None, route: str | None) -> list[tuple[str, str]]:
        wanted = {"tenant": tenant, "route": route}
        return [(scope, wanted[scope]) for scope in self.config.scopes if wanted[scope]]

    def throttles(self, tenant: str | None, route: str | None) -> list[Limits]:
        """The throttle limits a request counts against now (none unless ``throttle`` fired)."""
        if self.config.action != "throttle":
            return []
        return [Limits(subject=f"{RUNAWAY_SUBJECT}{scope}:{name}", rpm=self.config.throttle_rpm)
                for scope, name in self.subjects(tenant, route) if self.watch.active(scope, name)]

    def observe(self, tenant: str | None, route: str | None, usd: float) -> None:
        """Count a finished request's cost (USD) against its tenant and route."""
        for scope, name in self.subjects(tenant, route):
            self.watch.observe(scope, name, usd)


def throttled(exc: RateLimitExceeded, limits: Limits) -> SpendThrottled:
    """The 429 of a request over a runaway throttle (``limits``), from the limiter's own."""
    scope, _, name = limits.subject.removeprefix(RUNAWAY_SUBJECT).partition(":")
    return SpendThrottled(f"The spend rate of {scope} '{name}' ran far above its baseline: its requests are "
                          f"throttled to {limits.rpm} per minute", retry_after_s=exc.retry_after_s,
                          headers=exc.headers)
