"""Append-only JSONL journal: where rows go when the database cannot take them.

One line per row: ``{"t": "<table>", "row": {...}}`` with datetimes as ISO 8601. Rows are
appended when the write queue is full or a batch fails, and replayed in file order at
the next successful flush. Replay never reads a file that is still being appended to:
the journal is first renamed to ``<name>.replaying`` (atomic), appends go on into a fresh
file, and the ``.replaying`` file is deleted only after every row in it was committed. A
crash in between replays it again, which is harmless because writes are upserts.

Lines that cannot be parsed (a torn last line after a crash) are moved to
``<name>.rejected`` rather than dropped; the writer puts rows the database refuses (bad
data, not a down database) there too.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from gateway.store.models import TABLES

log = logging.getLogger("mixroute.store")

Item = tuple[str, dict[str, Any]]
"""A queued row: (table name, column -> value)."""

_DATETIME_COLUMNS = {"created_at", "first_seen"}


def _default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def encode(item: Item) -> str:
    """One journal line (without newline) for ``item``."""
    table, row = item
    return json.dumps({"t": table, "row": row}, default=_default, separators=(",", ":"))


def decode(line: str) -> Item:
    """Parse a journal line back into an item.

    Raises:
        ValueError: malformed line or unknown table.
    """
    obj = json.loads(line)
    table, row = obj["t"], obj["row"]
    if table not in TABLES or not isinstance(row, dict):
        raise ValueError(f"unknown journal entry for table {table!r}")
    for col in _DATETIME_COLUMNS & row.keys():
        if isinstance(row[col], str):
            row[col] = datetime.fromisoformat(row[col])
    return table, row


class Journal:
    """A thread-safe append-only spill file.

    Args:
        path: the journal file; its directory is created on first append.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.replaying = self.path.with_name(self.path.name + ".replaying")
        self.rejected = self.path.with_name(self.path.name + ".rejected")
        self._lock = threading.Lock()
        self._dirty = False

    def append(self, items: Sequence[Item], *, fsync: bool = True) -> None:
        """Append ``items`` in order.

        Args:
            items: rows to keep.
            fsync: force to disk now. The event-loop overflow path passes ``False``
                (the write still reaches the OS, so it survives a process crash) and the
                writer thread calls :meth:`sync` soon after.

        Raises:
            OSError: the file cannot be written.
        """
        if not items:
            return
        data = "".join(encode(it) + "\n" for it in items).encode()
        with self._lock:
            self._write(self.path, data, fsync)
            self._dirty = self._dirty or not fsync

    def reject(self, items: Sequence[Item] | Sequence[str]) -> None:
        """Keep rows (or raw lines) the database refused, in ``<name>.rejected``."""
        lines = [it if isinstance(it, str) else encode(it) for it in items]
        with self._lock:
            self._write(self.rejected, "".join(ln.rstrip("\n") + "\n" for ln in lines).encode(), True)

    def sync(self) -> None:
        """fsync appends made with ``fsync=False`` (no-op when there are none)."""
        with self._lock:
            self._sync_locked()

    def pending(self) -> bool:
        """Whether there are journaled rows not yet replayed."""
        return any(p.exists() and p.stat().st_size > 0 for p in (self.replaying, self.path))

    def begin_replay(self) -> bool:
        """Freeze the rows to replay into ``.replaying``; ``False`` when there are none.

        An existing ``.replaying`` file (a replay that failed or crashed) is older than
        the journal and is replayed first, so the journal is left alone until it is done.
        """
        with self._lock:
            if not self.replaying.exists():
                if not self.path.exists() or self.path.stat().st_size == 0:
                    return False
                self._sync_locked()
                os.replace(self.path, self.replaying)
            return True

    def batches(self, size: int) -> Iterator[list[Item]]:
        """Yield the ``.replaying`` rows in file order, ``size`` at a time."""
        batch: list[Item] = []
        bad: list[str] = []
        with open(self.replaying, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if not line.strip():
                    continue
                try:
                    batch.append(decode(line))
                except (ValueError, KeyError, TypeError):
                    bad.append(line)
                if len(batch) >= size:
                    yield batch
                    batch = []
        if batch:
            yield batch
        if bad:  # only once the whole file went through, so a retried replay does not repeat it
            log.warning("store journal: %d unreadable line(s) moved to %s", len(bad), self.rejected)
            self.reject(bad)

    def end_replay(self) -> None:
        """Every ``.replaying`` row is committed: delete the file."""
        with self._lock:
            self.replaying.unlink(missing_ok=True)

    def _sync_locked(self) -> None:
        if self._dirty and self.path.exists():
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        self._dirty = False

    @staticmethod
    def _write(path: Path, data: bytes, fsync: bool) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "ab") as fh:
            fh.write(data)
            fh.flush()
            if fsync:
                os.fsync(fh.fileno())
