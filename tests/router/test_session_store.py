"""The in-process session store stays bounded: least recently used sessions go past the cap,
and idle ones are dropped when a write finds them (no read needed)."""

from __future__ import annotations

import time

from router.session import InProcessSessions, SessionState


async def test_the_least_recently_used_session_goes_past_the_cap():
    store = InProcessSessions(max_sessions=3)
    for k in "abc":
        await store.put(k, SessionState(id=k), idle_s=60)
    assert await store.get("a", 60) is not None  # a is now the most recently used
    await store.put("d", SessionState(id="d"), idle_s=60)
    assert await store.get("b", 60) is None
    assert [await store.get(k, 60) is not None for k in "acd"] == [True, True, True]
    assert store.live() == 3


async def test_idle_sessions_are_dropped_by_a_later_write(monkeypatch):
    store = InProcessSessions(max_sessions=100)
    now = time.time()
    monkeypatch.setattr(time, "time", lambda: now)
    for k in "abc":
        await store.put(k, SessionState(id=k), idle_s=10)
        await store.add_lineage(f"lin-{k}", k, idle_s=10)
    await store.put("long", SessionState(id="long"), idle_s=1000)
    assert store.live() == 4
    monkeypatch.setattr(time, "time", lambda: now + 11)
    assert store.live() == 1  # expired ones no longer count
    await store.put("e", SessionState(id="e"), idle_s=10)
    await store.add_lineage("lin-e", "e", idle_s=10)
    assert len(store._s) == 2 and set(store._s) == {"long", "e"}  # memory released, not just hidden
    assert len(store._lineage) == 1
    assert await store.find_lineage(["lin-a", "lin-e"], 10) == "e"
