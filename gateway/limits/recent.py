"""Spend this gateway process settled lately, for rebuilding a budget counter that Redis lost.

The store is the source of truth for spend, but it lags: outcome rows wait in the writer's
queue (``MIXROUTE_STORE_FLUSH_INTERVAL_S``) and, while the database is down, in the journal.
A counter rebuilt from the store alone after a Redis restart forgets what was settled during
that lag, and the budget admits it again. So each process keeps, per budget, what it settled
in the last :data:`RECENT_S` seconds, by the second of the outcome's own timestamp (the
``outcomes.created_at`` the store will hold), and a rebuild splits time at a whole second:

    counter = store's spend of outcomes before the cut + this process's spend from the cut on

Both parts use the same timestamp, so no request counts in both. Other replicas add their own
part once, when they first meet the rebuilt counter (its ``gen``), leaving out what they
settled into that counter already; :class:`RecentSpend` remembers in which counter generation
each amount landed for that. Spend admitted without the limiter (fail-open, Redis down) is
kept here too: the store may not have it yet when Redis comes back empty.

A plain dict of per-second buckets rather than a library: it is a few integers per active
budget, read and written on the event loop only.
"""

from __future__ import annotations

import time

#: Seconds of settled spend a process keeps per budget: longer than the store normally lags
#: its settlements (the writer's flush interval), so a counter rebuilt from the store plus
#: this process's recent spend misses nothing of it.
RECENT_S = 60.0
#: Seconds amounts are kept: past :data:`RECENT_S`, so a replica that meets a rebuilt counter
#: a little late still holds what it must add (docs/LIMITS.md, "Losing Redis").
_KEEP_S = 2 * RECENT_S


class RecentSpend:
    """Nano-USD settled per budget ``(subject, period id)``, per second and counter generation."""

    def __init__(self) -> None:
        self._buckets: dict[tuple[str, str], dict[tuple[int, str], int]] = {}
        self._pruned = 0.0

    def add(self, subject: str, pid: str, at_s: float, nano: int, gen: str = "") -> None:
        """Count ``nano`` settled at ``at_s`` (unix seconds, the outcome's time) that landed in
        the counter generation ``gen`` (``""``: in no counter we know of, e.g. admitted
        fail-open or lost with Redis)."""
        if nano <= 0:
            return
        now = time.time()
        if now - self._pruned > 10.0:  # each prune walks every bucket
            self._prune(now)
        buckets = self._buckets.setdefault((subject, pid), {})
        key = (int(at_s), gen)
        buckets[key] = buckets.get(key, 0) + nano

    def total(self, subject: str, pid: str, since_s: int, *, landed_outside: str | None = None) -> int:
        """Nano-USD settled from second ``since_s`` on; with ``landed_outside``, only what did
        not land in that counter generation."""
        return sum(nano for (second, gen), nano in self._buckets.get((subject, pid), {}).items()
                   if second >= since_s and (landed_outside is None or gen != landed_outside))

    def _prune(self, now: float) -> None:
        self._pruned = now
        oldest = int(now - _KEEP_S)
        for key in list(self._buckets):
            kept = {k: v for k, v in self._buckets[key].items() if k[0] >= oldest}
            if kept:
                self._buckets[key] = kept
            else:
                del self._buckets[key]
