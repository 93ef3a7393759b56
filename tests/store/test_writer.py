"""The store writer against real databases: joins, upserts, batching, draining."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import timezone
from pathlib import Path

import pytest
from sqlalchemy import event, select

from gateway.store import Store, current, head
from gateway.store.models import Decision
from tests.store.conftest import rows, settings_for
from tests.store.records import T0, decision, outcome


async def test_start_migrates_a_fresh_database(db_url: str, tmp_path: Path) -> None:
    async with Store(settings_for(db_url), tmp_path / "j.jsonl"):
        assert current(db_url) == head()


async def test_decision_and_outcome_join_by_request_id(db_url: str, tmp_path: Path) -> None:
    async with Store(settings_for(db_url), tmp_path / "j.jsonl") as store:
        store.record_policy("p1", "version: 1\n")
        store.record_decision(decision("r1"))
        store.record_outcome(outcome("r1"))
        store.record_decision(decision("r2"))  # no outcome yet
        await store.flush()
        got = rows(db_url, """
            SELECT d.request_id, d.chosen, o.backend, o.tokens_out, o.cost_usd, o.streamed, p.text
            FROM decisions d JOIN outcomes o ON o.request_id = d.request_id
            JOIN policies p ON p.hash = d.policy_hash""")
        assert got == [("r1", "fake-small", "fake-small", 120, 1.4e-5, True, "version: 1\n")]
        with store.engine.connect() as conn:  # typed read through the models
            d = conn.execute(select(Decision).where(Decision.request_id == "r1")).one()
        assert d.candidates[0]["predicted_quality"] == 0.91
        assert d.signals == {"domain": "code", "difficulty": 0.3}
        assert d.fallbacks == ["fake-large"]
        assert d.created_at == T0 and d.created_at.tzinfo == timezone.utc
        assert store.stats.written == 4


async def test_same_request_twice_is_one_row_with_latest_values(db_url: str, tmp_path: Path) -> None:
    async with Store(settings_for(db_url), tmp_path / "j.jsonl") as store:
        store.record_decision(decision("r1", chosen="a"))
        await store.flush()
        store.record_decision(decision("r1", at=1, chosen="b"))
        await store.flush()
        # Same batch, twice more: still one row, newest wins.
        store.record_decision(decision("r1", at=2, chosen="c"))
        store.record_decision(decision("r1", at=3, chosen="d"))
        store.record_outcome(outcome("r1", status="error", http_status=502))
        store.record_outcome(outcome("r1", at=2, status="ok", http_status=200))
        await store.flush()
        assert rows(db_url, "SELECT request_id, chosen FROM decisions") == [("r1", "d")]
        assert rows(db_url, "SELECT status, http_status FROM outcomes") == [("ok", 200)]
        # An older record arriving late (a replayed journal) does not roll it back.
        store.record_decision(decision("r1", at=0.5, chosen="stale"))
        await store.flush()
        assert rows(db_url, "SELECT chosen FROM decisions") == [("d",)]


async def test_policy_keeps_first_seen(db_url: str, tmp_path: Path) -> None:
    for _ in range(2):
        async with Store(settings_for(db_url), tmp_path / "j.jsonl") as store:
            store.record_policy("p1", "v1")
            store.record_policy("p1", "v1")
    assert len(rows(db_url, "SELECT hash FROM policies")) == 1


async def test_rows_are_written_in_batches(db_url: str, tmp_path: Path) -> None:
    async with Store(settings_for(db_url, store_batch_size=7), tmp_path / "j.jsonl") as store:
        commits: list[int] = []
        event.listen(store.engine, "commit", lambda conn: commits.append(1))
        for i in range(50):
            store.record_decision(decision(f"r{i:02d}"))
        await store.flush()
        assert len(commits) == 8  # ceil(50 / 7) transactions
        assert rows(db_url, "SELECT count(*) FROM decisions") == [(50,)]


async def test_a_full_batch_is_written_without_waiting_the_interval(db_url: str, tmp_path: Path) -> None:
    settings = settings_for(db_url, store_batch_size=5, store_flush_interval_s=30)
    async with Store(settings, tmp_path / "j.jsonl") as store:
        for i in range(5):  # one at a time: the writer is waiting for the batch to fill
            store.record_decision(decision(f"r{i}"))
            await asyncio.sleep(0.01)
        for _ in range(200):  # no flush(): filling the batch must wake the writer
            if store.stats.written == 5:
                break
            await asyncio.sleep(0.01)
        assert store.stats.written == 5


async def test_rows_are_written_after_the_flush_interval(db_url: str, tmp_path: Path) -> None:
    settings = settings_for(db_url, store_batch_size=1000, store_flush_interval_s=0.05)
    async with Store(settings, tmp_path / "j.jsonl") as store:
        store.record_decision(decision("r1"))
        for _ in range(100):  # no flush(): the interval alone must get it written
            await asyncio.sleep(0.02)
            if store.stats.written:
                break
        assert rows(db_url, "SELECT request_id FROM decisions") == [("r1",)]


async def test_stop_drains_the_queue_without_waiting_the_interval(db_url: str, tmp_path: Path) -> None:
    settings = settings_for(db_url, store_batch_size=1000, store_flush_interval_s=30)
    store = Store(settings, tmp_path / "j.jsonl")
    await store.start()
    for i in range(30):
        store.record_decision(decision(f"r{i}"))
        store.record_outcome(outcome(f"r{i}"))
    t = time.monotonic()
    await store.stop()
    assert time.monotonic() - t < 5
    assert rows(db_url, "SELECT count(*) FROM decisions d JOIN outcomes o USING (request_id)") == [(30,)]
    assert store.stats.written == 60 and not store.journal.pending()
    store.record_decision(decision("late"))  # after stop: journaled, not lost
    assert store.journal.pending()


async def test_a_refused_row_is_set_aside_and_the_rest_written(db_url: str, tmp_path: Path, caplog) -> None:
    async with Store(settings_for(db_url), tmp_path / "j.jsonl") as store:
        store.record_decision(decision("ok1"))
        store.record_decision(decision("bad", pinned="maybe", signals={"note": "SECRET-PROMPT-TEXT"}))
        store.record_decision(decision("ok2"))
        await store.flush()
    assert rows(db_url, "SELECT request_id FROM decisions ORDER BY request_id") == [("ok1",), ("ok2",)]
    assert store.stats.rejected == 1
    kept = [json.loads(ln) for ln in store.journal.rejected.read_text().splitlines()]
    assert [k["row"]["request_id"] for k in kept] == ["bad"]
    assert "SECRET-PROMPT-TEXT" not in caplog.text


async def test_records_from_other_threads_are_handed_to_the_loop(db_url: str, tmp_path: Path) -> None:
    async with Store(settings_for(db_url, store_flush_interval_s=30), tmp_path / "j.jsonl") as store:
        await asyncio.gather(*(asyncio.to_thread(store.record_decision, decision(f"r{i}")) for i in range(20)))
        await asyncio.wait_for(store.flush(), 10)
        assert rows(db_url, "SELECT count(*) FROM decisions") == [(20,)]


async def test_writer_thread_yields_the_cpu_unless_a_backlog_is_queued(tmp_path) -> None:
    """The writer runs on its own thread under SCHED_IDLE while the queue holds less than a
    batch (requests preempt it at once), and under the normal policy with a backlog."""
    import os
    import threading

    if not hasattr(os, "SCHED_IDLE"):
        pytest.skip("no SCHED_IDLE on this OS")
    url = f"sqlite:///{tmp_path / 'w.db'}"
    seen: list[tuple[str, int]] = []
    store = Store(settings_for(url, store_batch_size=5), tmp_path / "j.jsonl")
    original = store._write

    def spy(items, paced=False):
        n = original(items, paced)
        seen.append((threading.current_thread().name, os.sched_getscheduler(0)))
        return n

    store._write = spy
    async with store:
        store.record_decision(decision("r-one"))
        await store.flush()
        assert seen[-1] == (seen[-1][0], os.SCHED_IDLE) and seen[-1][0].startswith("mixroute-store")
        for i in range(40):  # more than a batch queued before the writer runs: a backlog
            store.record_decision(decision(f"r-{i}"))
        await store.flush()
    assert any(policy == os.SCHED_OTHER for _, policy in seen)
    assert os.sched_getscheduler(0) == os.SCHED_OTHER  # the event loop's thread is untouched
    no_idle = Store(settings_for(url, store_writer_idle=False), tmp_path / "j2.jsonl")
    no_idle._write = lambda items, paced=False: seen.append(("off", os.sched_getscheduler(0))) or len(items)
    async with no_idle:
        no_idle.record_decision(decision("r-off"))
        await no_idle.flush()
    assert ("off", os.SCHED_OTHER) in seen


async def test_a_row_without_a_column_is_refused_with_that_reason(tmp_path, caplog) -> None:
    """A journaled row lacking a column (a hand-edited or foreign journal line) is set aside
    with a reason that names the column, not a bare KeyError."""
    url = f"sqlite:///{tmp_path / 'k.db'}"
    store = Store(settings_for(url), tmp_path / "j.jsonl")
    row = decision("no-time").as_dict()
    del row["created_at"]
    store.journal.append([("decisions", row)])
    with caplog.at_level("ERROR", logger="mixroute.store"):
        async with store:
            store.record_decision(decision("fine"))
            await store.flush()
    assert rows(url, "SELECT request_id FROM decisions") == [("fine",)]
    assert store.stats.rejected == 1 and "row lacks column 'created_at'" in caplog.text
