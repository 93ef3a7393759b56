"""A process's recent spend (:mod:`gateway.limits.recent`): what a rebuilt budget counter adds
to the store's part, split at a whole second of the outcomes' own time."""

from __future__ import annotations

import time

from gateway.limits.recent import RECENT_S, RecentSpend


def test_amounts_split_at_a_second_and_by_the_generation_they_landed_in() -> None:
    recent = RecentSpend()
    now = time.time()
    cut = int(now - RECENT_S)
    recent.add("k", "total", cut - 0.001, 5)  # before the cut: the store's part
    recent.add("k", "total", cut + 0.999, 7, gen="old")
    recent.add("k", "total", now, 11, gen="new")
    recent.add("k", "total", now, 13)  # admitted fail-open: landed in no counter
    recent.add("k", "total", now, 0)  # nothing to count
    recent.add("other", "total", now, 17)
    assert recent.total("k", "total", cut) == 31
    assert recent.total("k", "total", cut, landed_outside="new") == 20
    assert recent.total("k", "total", cut - 1) == 36
    assert recent.total("k", "202612", cut) == 0


def test_old_amounts_are_dropped() -> None:
    recent = RecentSpend()
    now = time.time()
    recent.add("k", "total", now - 10 * RECENT_S, 5)
    recent._pruned = 0.0  # the next add prunes
    recent.add("k", "total", now, 7)
    assert recent.total("k", "total", 0) == 7
