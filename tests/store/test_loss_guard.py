"""The loss guard counts the rows still queued for a database that is down (issue 40, item 3):
a writer slowed down by the outage spills many rows at once, and a journal whose room looked
large enough then dropped the last answered requests' records (the fault suite's ``money:
journal full`` row failed about one run in three on a loaded machine)."""

from __future__ import annotations

from gateway.settings import Settings
from gateway.store.journal import Journal
from gateway.store.loss import ROW_BYTES, LossGuard

CAP = 96 * 1024


def _guard(tmp_path) -> tuple[LossGuard, Journal]:
    journal = Journal(tmp_path / "j.jsonl", max_bytes=CAP)
    settings = Settings(store_journal_max_bytes=CAP)
    return LossGuard(settings, journal, "db"), journal


def test_rows_on_their_way_to_the_journal_count_against_its_room(tmp_path) -> None:
    guard, _ = _guard(tmp_path)
    assert guard.reserve == CAP // 4
    assert guard.keeps(database_down=False, unwritten_rows=10_000)  # they go to the database
    assert guard.keeps(database_down=True, unwritten_rows=0)
    fits = (CAP - guard.reserve) // ROW_BYTES
    assert guard.keeps(database_down=True, unwritten_rows=fits)
    assert not guard.keeps(database_down=True, unwritten_rows=fits + 1)


def test_once_refusing_it_takes_twice_the_reserve_to_accept_again(tmp_path) -> None:
    """So the answer does not flip back as the queued rows reach the journal and turn out
    smaller than counted."""
    guard, journal = _guard(tmp_path)
    journal.path.write_bytes(b"x" * (CAP - guard.reserve - 1024 * 8))  # room: reserve + 8 KiB
    assert guard.keeps(database_down=True)
    assert not guard.keeps(database_down=True, unwritten_rows=9)
    assert not guard.keeps(database_down=True)  # the rows are journaled: still under twice the reserve
    journal.path.write_bytes(b"")
    assert guard.keeps(database_down=True)
    assert not guard.keeps(database_down=True, unwritten_rows=CAP // ROW_BYTES)
    assert guard.keeps(database_down=False)  # the database is back
