"""The lock that keeps a spill journal to one process: an exclusive ``flock`` on
``<journal>.lock``, holding the holder's pid for the message a second process gets."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


class JournalInUse(RuntimeError):
    """Another process holds the journal's lock (:meth:`gateway.store.journal.Journal.lock`)."""

    def __init__(self, path: Path, holder: str) -> None:
        super().__init__(f"the store journal {path} is in use by another mixroute process ({holder}); give each "
                         "gateway its own journal (MIXROUTE_STORE_JOURNAL_PATH, or the default, which includes "
                         "the port)")
        self.path = path
        self.holder = holder


def lock_path(path: Path) -> Path:
    """The lock file of the journal at ``path`` (``<name>.lock``)."""
    return path.with_name(path.name + ".lock")


def journal_holder(path: Path) -> str | None:
    """Who holds the lock of the journal at ``path`` (``pid N``), or ``None`` when nobody
    does (the lock is taken and released at once to find out)."""
    lock = lock_path(Path(path))
    try:
        fd = try_lock(lock)
    except JournalInUse as exc:
        return exc.holder
    except OSError:
        return None  # a folder that cannot be written: journal_path_problem says so
    if fd is not None:
        lock.unlink(missing_ok=True)
        os.close(fd)
    return None


def try_lock(path: Path) -> int | None:
    """An open descriptor of ``path`` holding its exclusive ``flock``; ``None`` when the
    folder does not exist yet (nobody can hold a lock there).

    Raises:
        JournalInUse: another open file (another process, or another store in this one) holds it.
        OSError: the lock file cannot be created.
    """
    if not path.parent.is_dir():
        return None
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            # flock, not fcntl's record locks: those are per process, so a second store in the
            # same process would not be refused, and closing any descriptor of the file drops them.
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown pid"
            os.close(fd)
            raise JournalInUse(path.with_name(path.name.removesuffix(".lock")), holder) from None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the holder removed the file as we opened it: lock the new one
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()}\n".encode(), 0)
    return fd
