"""Append-only JSONL journal: where rows go when the database cannot take them.

One line per row: ``{"t": "<table>", "row": {...}}`` with datetimes as ISO 8601. Rows are
appended when the write queue is full or a batch fails, and replayed in file order at
the next successful flush. Replay never reads a file that is still being appended to:
the journal is first renamed to ``<name>.replaying`` (atomic), appends go on into a fresh
file, and the ``.replaying`` file is deleted only after every row in it was committed. A
crash in between replays it again, which is harmless because writes are upserts.

Damage. A line that cannot be read back (a torn last line after a crash, garbage, bytes
that are not UTF-8) does not stop the replay: every readable row is replayed, the
unreadable lines are copied byte for byte to ``<name>.rejected``, and the damage is
reported (an ERROR log line with the line numbers, and :attr:`Journal.last_damage`, which
the writer adds to ``StoreStats.damaged``). A process that appends after a crash first
ends the torn line, so a new row is never glued to a broken one. The writer puts rows the
database refuses (bad data, not a down database) in ``<name>.rejected`` too.

One writer. A journal belongs to one process: :meth:`Journal.lock` takes an exclusive
``flock`` on ``<name>.lock`` for the life of the store (:mod:`gateway.store.journal_lock`),
and a second process (another gateway replica given the same file) is refused with
:class:`~gateway.store.journal_lock.JournalInUse` instead of replaying the same rows.

Size cap. ``max_bytes`` bounds the journal and the file being replayed together: rows
that would go past it are not appended (:meth:`Journal.append` returns how many were);
the writer counts them in ``StoreStats.capped`` and logs it. The cap protects the disk
the gateway runs on during a long outage; size it to the outage you want to ride out
(a decision + outcome pair is about 1.5 KB).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from gateway.store.journal_lock import lock_path, try_lock
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


@dataclass(frozen=True)
class Damage:
    """An unreadable journal line: its 1-based number, byte offset, length and why."""

    line: int
    offset: int
    size: int
    reason: str


def decode(line: str) -> Item:
    """Parse a journal line back into an item; nullable columns the row lacks (a line
    journaled before they were added) are set to ``None``.

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
    for column in TABLES[table].columns:
        # A row journaled by an older release lacks the nullable columns added since
        # (e.g. outcomes.tokens_cache_write): it is replayed with NULL there, not refused.
        if column.nullable and column.name not in row:
            row[column.name] = None
    return table, row


def replaying_path(path: Path) -> Path:
    """Where the journal at ``path`` is moved while it is replayed (``<name>.replaying``)."""
    return path.with_name(path.name + ".replaying")


def _directory_in_the_way(path: Path) -> str | None:
    for p in (path, replaying_path(path)):
        if p.is_dir():  # begin_replay would rename the user's folder
            return f"{p} is a directory; the journal must be a file path"
    return None


def journal_path_problem(path: Path) -> str | None:
    """Why ``path`` cannot serve as a spill journal, or ``None``: it (or its ``.replaying``
    twin) is a directory, or its folder is not a writable directory (a missing folder is
    fine: it is created on first append, if its nearest existing parent is writable)."""
    path = Path(path)
    problem = _directory_in_the_way(path)
    if problem:
        return problem
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        return f"{parent} is not a directory, so the journal {path} cannot be created"
    if not os.access(parent, os.W_OK | os.X_OK) or not can_create_in(parent):
        return f"{parent} is not writable, so the journal {path} cannot be written"
    return None


def can_create_in(folder: Path) -> bool:
    """Whether a file can really be created in ``folder`` (``os.access`` says yes to root on
    read-only or virtual file systems such as ``/proc``): create and remove a probe file."""
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".mixroute-probe-"):
            return True
    except OSError:
        return False


class Journal:
    """A thread-safe append-only spill file.

    Args:
        path: the journal file; its directory is created on first append.
        max_bytes: cap on the journal plus the file being replayed (bytes); ``None``:
            no cap.

    Raises:
        ValueError: ``path`` (or its ``.replaying`` twin) is a directory.
    """

    def __init__(self, path: Path, max_bytes: int | None = None) -> None:
        self.path = Path(path)
        self.replaying = replaying_path(self.path)
        problem = _directory_in_the_way(self.path)
        if problem:
            raise ValueError(problem)
        self.rejected = self.path.with_name(self.path.name + ".rejected")
        self.max_bytes = max_bytes
        self.last_damage: list[Damage] = []
        """Unreadable lines of the last complete pass of :meth:`batches`."""
        self._lock = threading.Lock()
        self._lock_fd: int | None = None
        self._dirty = False
        self._tail_checked: set[Path] = set()

    def lock(self) -> None:
        """Take the journal for this process until :meth:`unlock` (creating its folder).

        Raises:
            gateway.store.journal_lock.JournalInUse: another process (or another store here) holds it.
            OSError: the lock file cannot be created.
        """
        if self._lock_fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._lock_fd = try_lock(lock_path(self.path))

    def unlock(self) -> None:
        """Release :meth:`lock` and remove the lock file (while still holding it: a process
        that opened the old file sees it was removed and locks a new one)."""
        if self._lock_fd is not None:
            lock_path(self.path).unlink(missing_ok=True)
            os.close(self._lock_fd)
            self._lock_fd = None

    def append(self, items: Sequence[Item], *, fsync: bool = True) -> int:
        """Append ``items`` in order, as many as fit under ``max_bytes``.

        Args:
            items: rows to keep.
            fsync: force to disk now. The event-loop overflow path passes ``False``
                (the write still reaches the OS, so it survives a process crash) and the
                writer thread calls :meth:`sync` soon after.

        Returns:
            How many of ``items`` (a prefix) were appended; fewer than ``len(items)``
            only when the cap was reached.

        Raises:
            OSError: the file cannot be written.
        """
        if not items:
            return 0
        lines = [(encode(it) + "\n").encode() for it in items]
        with self._lock:
            if self.max_bytes is not None:
                room = self.max_bytes - self.size()
                kept = 0
                while kept < len(lines) and room >= len(lines[kept]):
                    room -= len(lines[kept])
                    kept += 1
                lines = lines[:kept]
            if lines:
                self._write(self.path, b"".join(lines), fsync)
                self._dirty = self._dirty or not fsync
        return len(lines)

    def size(self) -> int:
        """Bytes in the journal and the file being replayed."""
        total = 0
        for p in (self.path, self.replaying):
            try:
                total += p.stat().st_size
            except FileNotFoundError:
                pass
        return total

    def room(self) -> int:
        """Bytes the journal can still take: the space left under ``max_bytes`` or on its
        file system (for an unprivileged process), whichever is less."""
        folder = self.path.parent
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent
        try:
            free = shutil.disk_usage(folder).free
        except OSError:
            free = 0
        return free if self.max_bytes is None else min(free, self.max_bytes - self.size())

    def reject(self, items: Sequence[Item] | Sequence[str] | Sequence[bytes]) -> None:
        """Keep rows (or raw lines, kept byte for byte) the database refused or that
        could not be read, in ``<name>.rejected``."""
        data = b""
        for it in items:
            raw = it if isinstance(it, bytes) else (it if isinstance(it, str) else encode(it)).encode()
            data += raw.rstrip(b"\n") + b"\n"
        with self._lock:
            self._write(self.rejected, data, True)

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
        """Yield the ``.replaying`` rows in file order, ``size`` at a time.

        Unreadable lines are skipped, and once the whole file went through (so that a
        retried replay does not repeat it) they are copied to ``.rejected``, logged,
        and listed in :attr:`last_damage`.
        """
        batch: list[Item] = []
        bad: list[tuple[Damage, bytes]] = []
        offset = 0
        with open(self.replaying, "rb") as fh:
            for number, raw in enumerate(fh, start=1):
                start, offset = offset, offset + len(raw)
                if not raw.strip():
                    continue
                try:
                    batch.append(decode(raw.decode("utf-8")))
                except (ValueError, KeyError, TypeError) as err:  # UnicodeDecodeError is a ValueError
                    torn = not raw.endswith(b"\n")
                    why = "torn last line" if torn else f"{type(err).__name__}"
                    bad.append((Damage(number, start, len(raw), why), raw))
                if len(batch) >= size:
                    yield batch
                    batch = []
        if batch:
            yield batch
        self.last_damage = [d for d, _ in bad]
        if bad:
            self.reject([raw for _, raw in bad])
            shown = ", ".join(f"line {d.line} at byte {d.offset} ({d.reason})" for d in self.last_damage[:5])
            more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
            log.error("store journal %s is damaged: %d unreadable line(s) (%s%s) skipped and kept in %s; "
                      "every readable row was replayed", self.replaying, len(bad), shown, more, self.rejected)

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

    def _write(self, path: Path, data: bytes, fsync: bool) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "ab+") as fh:
            if path not in self._tail_checked:
                # A crash mid-append leaves a torn last line: end it, so the next row
                # starts on a line of its own and only the torn one is lost to damage.
                self._tail_checked.add(path)
                if fh.seek(0, os.SEEK_END) > 0:
                    fh.seek(-1, os.SEEK_END)
                    if fh.read(1) != b"\n":
                        data = b"\n" + data
            fh.write(data)
            fh.flush()
            if fsync:
                os.fsync(fh.fileno())
