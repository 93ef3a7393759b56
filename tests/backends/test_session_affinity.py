"""Replica stickiness: a call whose context names a session stays on the session's replica
while that replica is healthy and not overloaded (:mod:`backends.vllm.affinity`)."""

from __future__ import annotations

from backends.call import CallContext
from backends.vllm.affinity import AffinityChooser
from backends.vllm.pool import LeastLoadedChooser, Pool, Replica
from tests.backends.test_affinity import conv

SHORT = {"messages": [{"role": "user", "content": "hi"}]}  # under one block: no prefix to follow


def replicas(n: int = 3) -> list[Replica]:
    return [Replica(f"http://r{i}/v1") for i in range(n)]


def test_a_session_stays_on_its_replica_where_short_prompts_would_rotate():
    chooser, reps = AffinityChooser(), replicas()
    alone = [chooser.choose(reps, SHORT).base_url for _ in range(3)]
    assert len(set(alone)) == 3  # least loaded, round-robin among equals
    ctx = CallContext(session_id="s1")
    picks = [chooser.choose(reps, SHORT, ctx).base_url for _ in range(6)]
    assert len(set(picks)) == 1 and chooser.reasons["session"] == 5
    other = [chooser.choose(reps, SHORT, CallContext(session_id=f"other{i}")).base_url for i in range(3)]
    assert len(set(other)) == 3  # a new session is placed as any request, then kept


def test_a_session_follows_the_shared_state_of_its_last_turn():
    """``session_replica`` (the replica of the last answered turn, from the shared session
    state) wins over this chooser's own memory: another gateway may have moved the session."""
    chooser, reps = AffinityChooser(), replicas()
    mine = chooser.choose(reps, conv(1), CallContext(session_id="s"))
    elsewhere = next(r for r in reps if r is not mine)
    moved = CallContext(session_id="s", session_replica=elsewhere.shown_url)
    assert chooser.choose(reps, conv(1, 2), moved) is elsewhere and chooser.last_reason == "session"
    assert chooser.choose(reps, SHORT, CallContext(session_id="s")) is elsewhere  # remembered since
    unknown = CallContext(session_id="s", session_replica="http://gone/v1")  # a replica not in this pool
    assert chooser.choose(reps, SHORT, unknown) is elsewhere


def test_an_overloaded_session_replica_is_left_and_the_session_stays_on_the_new_one():
    chooser, reps = AffinityChooser(min_bound=2, load_factor=1.0), replicas()
    ctx = CallContext(session_id="s")
    home = chooser.choose(reps, SHORT, ctx)
    home.in_flight = 5
    away = chooser.choose(reps, SHORT, ctx)
    assert away is not home and chooser.last_reason != "session"
    home.in_flight = 0
    assert chooser.choose(reps, SHORT, ctx) is away and chooser.last_reason == "session"
    away.metrics.waiting = 50  # a scraped queue over the threshold is overload too
    assert chooser.choose(reps, SHORT, ctx) is not away


def test_an_ejected_session_replica_is_left():
    pool = Pool([r.base_url for r in replicas()], AffinityChooser(), eject_after=1, retry_ejected_s=60)
    ctx = CallContext(session_id="s")
    home = pool.pick(SHORT, context=ctx)
    pool.failed(home)
    assert not home.healthy
    away = pool.pick(SHORT, context=ctx)
    assert away is not home
    pool.succeeded(home)  # back: the session stays where it moved
    assert pool.pick(SHORT, context=ctx) is away


def test_preview_names_the_session_replica_and_changes_nothing():
    chooser = AffinityChooser()
    pool = Pool([r.base_url for r in replicas()], chooser)
    ctx = CallContext(session_id="s")
    home = pool.pick(SHORT, context=ctx)
    kept = dict(chooser.sessions)
    assert pool.preview(SHORT, ctx) == (home, "session")
    assert pool.preview(SHORT, CallContext(session_id="new"))[1] == "short_prompt"
    assert chooser.sessions == kept


def test_remembered_sessions_are_bounded():
    chooser, reps = AffinityChooser(sessions_kept=2), replicas()
    for i in range(5):
        chooser.choose(reps, SHORT, CallContext(session_id=f"s{i}"))
    assert list(chooser.sessions) == ["s3", "s4"]


def test_least_loaded_pools_do_not_keep_sessions():
    """``affinity: false`` spreads by load alone, sessions included (documented)."""
    pool = Pool([r.base_url for r in replicas()], LeastLoadedChooser())
    ctx = CallContext(session_id="s")
    assert len({pool.pick(SHORT, context=ctx).base_url for _ in range(3)}) == 3
