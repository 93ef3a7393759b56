"""Journal hardening: the size cap, and damaged journals replayed up to (and past) the damage."""

from __future__ import annotations

import logging
from pathlib import Path

from gateway.store import Store
from gateway.store.journal import Journal, encode
from tests.store.conftest import rows, settings_for
from tests.store.records import decision, outcome


def _line(rid: str) -> bytes:
    return (encode(("decisions", decision(rid).as_dict())) + "\n").encode()


def test_append_stops_at_the_cap_and_says_how_many_fit(tmp_path: Path) -> None:
    one = len(_line("r0"))
    journal = Journal(tmp_path / "j.jsonl", max_bytes=3 * one + 10)
    assert journal.append([("decisions", decision(f"r{i}").as_dict()) for i in range(2)]) == 2
    assert journal.append([("decisions", decision(f"r{i}").as_dict()) for i in range(2, 5)]) == 1
    assert journal.append([("decisions", decision("r9").as_dict())]) == 0
    assert journal.size() == 3 * one
    assert journal.begin_replay() and journal.size() == 3 * one  # the file being replayed counts too
    assert journal.append([("decisions", decision("r9").as_dict())]) == 0


async def test_store_counts_and_logs_rows_dropped_at_the_cap(tmp_path: Path, caplog) -> None:
    url = f"sqlite:///{tmp_path / 'missing-dir' / 'store.db'}"  # down: everything spills
    one = len(_line("r00"))
    store = Store(settings_for(url, store_journal_max_bytes=5 * one, store_queue_size=3), tmp_path / "j.jsonl")
    caplog.set_level(logging.ERROR, "mixroute.store")
    for i in range(10):  # before start: 3 queued, 7 overflow, 2 of them over the cap
        store.record_decision(decision(f"r{i:02d}"))
    assert (store.stats.overflowed, store.stats.capped, store.stats.lost) == (5, 2, 2)
    await store.start()
    await store.stop()  # the 3 queued rows cannot be journaled either
    assert (store.stats.capped, store.stats.lost, store.stats.spilled) == (5, 5, 0)
    capped = [r.getMessage() for r in caplog.records if "size cap" in r.getMessage()]
    assert capped and "MIXROUTE_STORE_JOURNAL_MAX_BYTES" in capped[0]
    assert len(capped) <= 3  # rate-limited: 1, 3, 7, ... rows, not one line per row


async def test_damaged_lines_are_skipped_kept_counted_and_logged(db_url: str, tmp_path: Path, caplog) -> None:
    path = tmp_path / "j.jsonl"
    garbage = b"\x00\x00\x00 not json\n"
    not_utf8 = b'{"t":"decisions","row":{"request_id":"\xff\xfe"}}\n'
    torn = _line("r4")[:40]
    path.write_bytes(_line("r1") + garbage + _line("r2") + not_utf8 + b"\n" + _line("r3") + torn)
    caplog.set_level(logging.ERROR, "mixroute.store")
    async with Store(settings_for(db_url), path) as store:
        assert store.stats.replayed == 3 and store.stats.damaged == 3
    assert rows(db_url, "SELECT request_id FROM decisions ORDER BY request_id") == [("r1",), ("r2",), ("r3",)]
    kept = Journal(path).rejected.read_bytes()
    assert kept == garbage + not_utf8 + torn + b"\n"  # byte for byte, never dropped
    [msg] = [r.getMessage() for r in caplog.records if "damaged" in r.getMessage()]
    assert "3 unreadable line(s)" in msg and "line 2 at byte" in msg and "torn last line" in msg


def test_a_new_row_never_joins_a_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    path.write_bytes(_line("r1")[:30])  # a crash mid-append
    journal = Journal(path)  # the next process
    journal.append([("outcomes", outcome("r2").as_dict())])
    journal.append([("outcomes", outcome("r3").as_dict())])
    assert journal.begin_replay()
    got = [row["request_id"] for batch in journal.batches(10) for _, row in batch]
    assert got == ["r2", "r3"] and [d.line for d in journal.last_damage] == [1]
