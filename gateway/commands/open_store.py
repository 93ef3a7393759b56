"""Opening the store for the offline commands (``logs export``, ``logs prune``, ``policy
what-if``), with the checks that turn a wrong database into one line instead of a SQL error.

:func:`open_store` refuses (:class:`StoreUnusable`; the commands exit with status 2) a SQLite
file that does not exist (connecting would create an empty one), a file that is not SQLite,
a database with no tables (never migrated), one with tables but no migration record (not a
mixroute store) and one at an older revision; each message says what to do. Commands that
only read open a SQLite file read-only (:func:`gateway.store.db.make_engine`), so a wrong
``--database-url`` or ``--logs`` leaves another program's database as it was.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy import Engine
    from sqlalchemy.engine import URL

#: The first 16 bytes of every SQLite 3 database file (https://www.sqlite.org/fileformat.html).
SQLITE_HEADER = b"SQLite format 3\x00"
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
    return head == SQLITE_HEADER or (head == b"" and path.suffix.lower() in _SQLITE_SUFFIXES)


def _check_file(path: Path) -> None:
    """Raises :class:`StoreUnusable` unless ``path`` is an existing SQLite file (or empty)."""
    if not path.exists():
        raise StoreUnusable(f"no such SQLite database file: {path} (`mixroute db upgrade` creates a store)")
    if path.is_dir():
        raise StoreUnusable(f"{path} is a folder, not a SQLite database file")
    if _header(path) not in (b"", SQLITE_HEADER, None):  # None: unreadable, SQLite says why
        raise StoreUnusable(f"{path} is not a SQLite database (it does not start with {SQLITE_HEADER[:15].decode()!r})")


def _check_revision(engine: "Engine") -> None:
    from alembic.script import ScriptDirectory
    from sqlalchemy import inspect

    from gateway.store import db

    rev = db.current(engine)
    if rev is None:
        tables = sorted(inspect(engine).get_table_names())
        if not tables:
            raise StoreUnusable(f"the store was never migrated (no tables): {_UPGRADE}")
        shown = ", ".join(tables[:5]) + (f" and {len(tables) - 5} more" if len(tables) > 5 else "")
        raise StoreUnusable(f"not a mixroute store: it has tables ({shown}) but no migration record "
                            "(alembic_version); check the URL (`mixroute db upgrade` makes a store)")
    older = [r.revision for r in ScriptDirectory.from_config(db.alembic_config()).walk_revisions()][1:]
    if rev in older:
        raise StoreUnusable(f"the store is at revision {rev}, head is {db.head()}: {_UPGRADE}")


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
