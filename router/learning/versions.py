"""Versioned adapter sets: a folder of versions, the ``active.json`` pointer, the event log.

Layout of the versions folder (``MIXROUTE_ADAPTERS_DIR``)::

    <dir>/active.json          {"version": "v...", "history": ["shipped", ...], "at": ISO time}
    <dir>/events.jsonl         one JSON line per promote, rollback and automatic rollback
    <dir>/<version>/version.json   what the version is (:class:`VersionInfo`)
    <dir>/<version>/heads/         its own classifier head folders (optional; else its parent's)
    <dir>/<version>/outcomes.json  its outcome-memory correction (optional, :mod:`router.learning.baked`)

The heads that ship with the package are version ``shipped``: always present, never a
folder here. No pointer means ``shipped`` is active. ``history`` is the stack of versions
active before, newest last, so ``rollback`` returns to the one before.

Every change of the pointer takes an exclusive ``flock`` on ``<dir>/.lock`` and replaces the
file by rename, so a gateway polling it reads the old pointer or the new one, never half of
one, and a command's promote and a gateway's automatic rollback cannot interleave. The
folder is the state shared by the replicas (a volume every gateway mounts), like the store.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

#: The version id of the heads shipped with the package.
SHIPPED = "shipped"
ACTIVE_FILE = "active.json"
EVENTS_FILE = "events.jsonl"
INFO_FILE = "version.json"
HEADS_DIR = "heads"
#: Most versions kept in ``history`` (older ones can still be promoted by id).
HISTORY = 50
#: A version id: letters, digits, ``.``, ``_``, ``-``; starts with a letter or digit.
VERSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class VersionError(Exception):
    """A version folder or pointer problem; ``str()`` is the one line to show."""


def default_dir() -> Path:
    """``$XDG_DATA_HOME/mixroute/adapters``, else ``~/.local/share/mixroute/adapters``
    (the XDG base directory rule, written out rather than a dependency for one path)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "mixroute" / "adapters"


@dataclass
class VersionInfo:
    """What ``version.json`` says about a version.

    Attributes:
        version: its id (the folder's name).
        created_at: ISO 8601 UTC time it was written.
        parent: the version it was built from (its heads, unless it has its own).
        source: how it was made (``logs``: ``mixroute train --from-logs``; ``shipped``).
        trained_until: ISO time of the newest observation its correction counts
            (later ones are the live memory's); ``None`` without a correction.
        holdout_from: ISO time from which logs were held out of training (``mixroute
            eval --adapters-version`` evaluates on them); ``None``: nothing held out.
        notes: what it rebuilt and what it could not, one line each.
        counts: rows read, observations used, held out, per backend.
    """

    version: str
    created_at: str
    parent: str = SHIPPED
    source: str = "logs"
    trained_until: str | None = None
    holdout_from: str | None = None
    notes: list[str] = field(default_factory=list)
    counts: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def read(cls, path: Path) -> "VersionInfo":
        """Raises: VersionError: the file is missing or not a version description."""
        try:
            data = json.loads(path.read_text())
            return cls(**{k: data[k] for k in data if k in cls.__dataclass_fields__})
        except (OSError, ValueError, TypeError) as exc:
            raise VersionError(f"{path}: not a readable version description ({type(exc).__name__})") from None


@dataclass(frozen=True)
class Active:
    """The pointer: the active version and the ones active before it (newest last)."""

    version: str = SHIPPED
    history: tuple[str, ...] = ()
    at: str | None = None


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class Versions:
    """The versions folder (module docstring). Nothing is created until something is written.

    Args:
        root: the folder (``MIXROUTE_ADAPTERS_DIR``).
        shipped_heads: the package's head folders (version ``shipped``).
    """

    def __init__(self, root: Path, shipped_heads: Path | None = None) -> None:
        self.root = Path(root)
        self.shipped_heads = shipped_heads

    # Reading ---------------------------------------------------------------------------

    def exists(self, version: str) -> bool:
        return version == SHIPPED or (VERSION_ID.match(version) is not None
                                      and (self.root / version / INFO_FILE).is_file())

    def info(self, version: str) -> VersionInfo:
        """Raises: VersionError: no such version, or its description is unreadable."""
        if version == SHIPPED:
            return VersionInfo(version=SHIPPED, created_at="", parent="", source=SHIPPED)
        if not self.exists(version):
            raise VersionError(f"no adapter version {version!r} in {self.root} (known: {', '.join(self.ids())})")
        return VersionInfo.read(self.root / version / INFO_FILE)

    def ids(self) -> list[str]:
        """``shipped`` and every version folder, oldest first (by its ``created_at``)."""
        found = []
        if self.root.is_dir():
            for p in self.root.iterdir():
                if p.is_dir() and VERSION_ID.match(p.name) and (p / INFO_FILE).is_file():
                    try:
                        found.append((VersionInfo.read(p / INFO_FILE).created_at, p.name))
                    except VersionError:
                        found.append(("", p.name))
        return [SHIPPED] + [name for _, name in sorted(found)]

    def folder(self, version: str) -> Path | None:
        """The version's own folder (``None`` for ``shipped``)."""
        return None if version == SHIPPED else self.root / version

    def heads(self, version: str) -> tuple[str, Path | None]:
        """``(version whose heads it uses, their folder)``: its own ``heads/`` if it has
        one, else its parent's, up to ``shipped`` (``shipped_heads``).

        Raises:
            VersionError: a missing parent, or a cycle of parents.
        """
        seen: set[str] = set()
        while version != SHIPPED:
            if version in seen:
                raise VersionError(f"adapter version {version!r} is its own ancestor")
            seen.add(version)
            own = self.root / version / HEADS_DIR
            if own.is_dir():
                return version, own
            version = self.info(version).parent or SHIPPED
        return SHIPPED, self.shipped_heads

    def active(self) -> Active:
        """The pointer (``shipped`` when there is none).

        Raises:
            VersionError: the pointer exists but cannot be read.
        """
        path = self.root / ACTIVE_FILE
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            return Active()
        except (OSError, ValueError) as exc:
            raise VersionError(f"{path}: unreadable ({type(exc).__name__})") from None
        if not isinstance(data, dict) or not isinstance(data.get("version"), str):
            raise VersionError(f"{path}: no \"version\" string")
        history = data.get("history") or []
        return Active(data["version"], tuple(h for h in history if isinstance(h, str)), data.get("at"))

    def events(self, limit: int | None = None) -> list[dict[str, Any]]:
        """The event log, oldest first (the last ``limit``); unreadable lines are skipped."""
        path = self.root / EVENTS_FILE
        try:
            lines = path.read_text().splitlines()
        except FileNotFoundError:
            return []
        out = []
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict):
                out.append(event)
        return out[-limit:] if limit else out

    # Writing ---------------------------------------------------------------------------

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _point(self, active: Active) -> None:
        path = self.root / ACTIVE_FILE
        tmp = path.with_name(f".{ACTIVE_FILE}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(asdict(active) | {"history": list(active.history)}, indent=1) + "\n")
        os.replace(tmp, path)

    def _log(self, event: dict[str, Any]) -> None:
        with open(self.root / EVENTS_FILE, "a") as f:
            f.write(json.dumps(event, sort_keys=True) + "\n")

    def promote(self, version: str, *, by: str = "cli", reason: str = "") -> Active:
        """Make ``version`` active (the current one goes on the history).

        Raises:
            VersionError: no such version (nothing changes).
        """
        self.info(version)
        with self._locked():
            old = self.active()
            if old.version == version:
                return old
            new = Active(version, (old.history + (old.version,))[-HISTORY:], _now())
            self._point(new)
            self._log({"at": new.at, "event": "promote", "version": version, "from": old.version, "by": by,
                       "reason": reason})
        return new

    def rollback(self, *, expect: str | None = None, by: str = "cli", reason: str = "",
                 event: str = "rollback") -> Active | None:
        """Make the version active before the current one active again (``shipped`` when
        the history is empty). With ``expect``, only if ``expect`` is still the active one
        (replicas rolling the same version back do it once); ``None`` when it is not.

        Raises:
            VersionError: the pointer cannot be read, or ``shipped`` is active with no history.
        """
        with self._locked():
            old = self.active()
            if expect is not None and old.version != expect:
                return None
            if old.version == SHIPPED and not old.history:
                raise VersionError("nothing to roll back: the shipped adapters are active and no version was "
                                   "active before")
            history = list(old.history)
            target = SHIPPED
            while history:  # skip versions whose folder has gone since
                candidate = history.pop()
                if self.exists(candidate) and candidate != old.version:
                    target = candidate
                    break
            new = Active(target, tuple(history), _now())
            self._point(new)
            self._log({"at": new.at, "event": event, "version": target, "from": old.version, "by": by,
                       "reason": reason})
        return new

    def create(self, info: VersionInfo, fill: Callable[[Path], None] | None = None) -> Path:
        """A new version folder: ``version.json``, plus what ``fill`` writes into the folder.
        It is built under a temporary name and renamed into place, so no reader ever sees
        half a version (a failed ``fill`` leaves nothing behind).

        Raises:
            VersionError: a bad id, ``shipped``, or a version that exists already.
        """
        if info.version == SHIPPED or not VERSION_ID.match(info.version):
            raise VersionError(f"bad adapter version id {info.version!r}: letters, digits, '.', '_' or '-', "
                               f"up to 64, not {SHIPPED!r}")
        folder = self.root / info.version
        if folder.exists():
            raise VersionError(f"adapter version {info.version!r} exists already in {self.root}")
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{info.version}.", dir=self.root))
        try:
            if fill is not None:
                fill(tmp)
            (tmp / INFO_FILE).write_text(json.dumps(asdict(info), indent=1) + "\n")
            os.rename(tmp, folder)
        except OSError:
            if folder.exists():  # another writer won the race (rename onto a non-empty folder fails)
                raise VersionError(f"adapter version {info.version!r} exists already in {self.root}") from None
            raise
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        return folder


def new_version_id(now: datetime | None = None) -> str:
    """A fresh id from the time: ``v20261206-013000``."""
    return (now or datetime.now(timezone.utc)).strftime("v%Y%m%d-%H%M%S")
