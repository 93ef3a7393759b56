"""Opening the store for the offline commands (``logs export``, ``logs prune``, ``policy
what-if``), with the checks that turn a wrong database into one line instead of a SQL error.

:func:`open_store` refuses (:class:`StoreUnusable`; the commands exit with status 2) a SQLite
file that does not exist (connecting would create an empty one), a file that is not SQLite,
a database with no tables or only an empty ``alembic_version`` (never migrated), one with
tables but no migration record or at a revision that is not one of mixroute's migrations
(another program's Alembic database, or a newer mixroute's store: not a mixroute store) and
one at an older revision; each message says what to do. Commands that
only read open a SQLite file read-only (:func:`gateway.store.db.make_engine`), so a wrong
``--database-url`` or ``--logs`` leaves another program's database as it was.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from gateway.store.db import SQLITE_HEADER

if TYPE_CHECKING:
    from sqlalchemy import Engine
    from sqlalchemy.engine import URL

_SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")
_UPGRADE = "run `mixroute db upgrade` first"


class StoreUnusable(Exception):
    """The database is not a store these commands can read; the message (one line, without
    the URL) says why and what to do."""


def _header(path: Path) -> bytes | None:
    """The first bytes of ``path`` (``b""`` for an empty file); ``None`` when unreadable."""
    try:
        with path.open("rb") as fh:
            return fh.read(len(SQLITE_HEADER))
    except OSError:
        return None


def looks_like_sqlite(path: Path) -> bool:
    """Whether the file ``path`` is a SQLite database: it starts with :data:`SQLITE_HEADER`,
    or it is empty (an empty database to SQLite) and named ``.db``, ``.sqlite`` or ``.sqlite3``."""
    head = _header(path)
    return head == SQLITE_HEADER or (head == b"" and named_like_sqlite(path))


def named_like_sqlite(path: Path) -> bool:
    """Whether ``path`` ends in ``.db``, ``.sqlite`` or ``.sqlite3`` (any case)."""
    return path.suffix.lower() in _SQLITE_SUFFIXES


def _check_file(path: Path) -> None:
    """Raises :class:`StoreUnusable` unless ``path`` is an existing SQLite file (or empty)."""
    if not path.exists():
        raise StoreUnusable(f"no such SQLite database file: {path} (`mixroute db upgrade` creates a store)")
    if path.is_dir():
        raise StoreUnusable(f"{path} is a folder, not a SQLite database file")
    if _header(path) not in (b"", SQLITE_HEADER, None):  # None: unreadable, SQLite says why
        raise StoreUnusable(f"{path} is not a SQLite database (it does not start with {SQLITE_HEADER[:15].decode()!r})")


def _listed(tables: list[str]) -> str:
    return ", ".join(tables[:5]) + (f" and {len(tables) - 5} more" if len(tables) > 5 else "")


def _check_revision(engine: "Engine") -> None:
    """Raises :class:`StoreUnusable` unless the database is a mixroute store at the head revision."""
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory
    from sqlalchemy import inspect

    from gateway.store import db

    with engine.connect() as conn:
        revisions = MigrationContext.configure(conn).get_current_heads()
        tables = sorted(inspect(conn).get_table_names())
    if not revisions:
        others = [t for t in tables if t != "alembic_version"]
        if not others:  # `db upgrade` migrates an empty alembic_version table from the start
            what = "its only table, alembic_version, is empty" if tables else "no tables"
            raise StoreUnusable(f"the store was never migrated ({what}): {_UPGRADE}")
        record = ("its migration record (alembic_version) is empty" if "alembic_version" in tables
                  else "no migration record (alembic_version)")
        raise StoreUnusable(f"not a mixroute store: it has tables ({_listed(others)}) but {record}; check the "
                            "URL (`mixroute db upgrade` makes a store)")
    known = [r.revision for r in ScriptDirectory.from_config(db.alembic_config()).walk_revisions()]  # head first
    if len(revisions) > 1:  # mixroute's migrations are one line: one revision at a time
        raise StoreUnusable(f"not a mixroute store (its alembic_version holds {len(revisions)} revisions, "
                            f"{', '.join(repr(r[:40]) for r in revisions[:3])}; a mixroute store holds one)")
    rev = revisions[0]
    if rev not in known:  # another program's Alembic database, or a store of a newer mixroute
        raise StoreUnusable(f"not a mixroute store (its alembic revision {rev[:40]!r} is not one of mixroute's, "
                            f"{known[-1]}..{known[0]}; a newer mixroute's store, or another program's database?)")
    if rev != known[0]:
        raise StoreUnusable(f"the store is at revision {rev}, head is {known[0]}: {_UPGRADE}")


def sqlite_files(path: Path, flag: str) -> list[tuple[Path, str]]:
    """``(file, label)`` of a SQLite database ``path`` and its ``-wal``, ``-shm`` and
    ``-journal`` files (named by the option ``flag`` that gave the database), for a command
    to refuse writing its output over them (:func:`gateway.commands.output.check_not_input`)."""
    side = [(path.with_name(path.name + s), f"the {s} file of {flag} {path}:") for s in ("-wal", "-shm", "-journal")]
    return [(path, flag), *side]


def store_files(url: "str | URL", flag: str) -> list[tuple[Path, str]]:
    """:func:`sqlite_files` of the SQLite store at ``url`` (a ``file:`` URI too); empty for
    another kind of database, an in-memory one, or a URL that does not parse (opening it
    says why)."""
    from urllib.parse import unquote, urlsplit

    from sqlalchemy.exc import ArgumentError

    from gateway.store import db

    try:
        parsed = db.normalize_url(url)
        path = db.sqlite_path(parsed)
    except ArgumentError:
        return []
    if path is None:
        return []
    if str(parsed.query.get("uri", "")).lower() in ("true", "1") and str(parsed.database).startswith("file:"):
        path = Path(unquote(urlsplit(str(parsed.database)).path))  # SQLite's file: URI
    return sqlite_files(path, flag)


def open_store(url: "str | URL", *, read_only: bool) -> "Engine":
    """An engine on the store at ``url``, checked to be migrated to the head revision.

    Args:
        url: database URL.
        read_only: return an engine that opens a SQLite file read-only (``logs export``,
            ``policy what-if``). The checks always open it read-only, so a database that is
            refused is left as it was either way.

    Raises:
        StoreUnusable: see the module docstring.
        sqlalchemy.exc.SQLAlchemyError, ImportError: a bad URL, a missing database driver or
            an unreachable database (:func:`gateway.commands.db.fail` words them).
    """
    from gateway.store import db

    path = db.sqlite_path(url)
    if path is not None and not db.normalize_url(url).query.get("uri"):  # a file: URI is SQLite's to check
        _check_file(path)
    # Checked read-only even for a writer (prune): a foreign database is refused as it was,
    # not first switched to WAL by the writer's connect.
    engine = db.make_engine(url, read_only=True)
    try:
        _check_revision(engine)
    except BaseException:
        engine.dispose()
        raise
    if read_only or path is None:  # read_only changes nothing but SQLite files
        return engine
    engine.dispose()
    return db.make_engine(url)
