"""Engines and migrations of the store.

Alembic is configured in code (no ``alembic.ini``): ``script_location`` is the directory
of the installed :mod:`migrations` package, so ``mixroute db upgrade`` and the automatic
upgrade in :meth:`gateway.store.Store.start` work from a wheel as well as a checkout.

URLs: ``postgresql://`` and ``postgres://`` are mapped to the psycopg 3 driver
(``postgresql+psycopg://``); anything else is passed to SQLAlchemy unchanged. A URL whose
port or query value its driver cannot take (``h:notaport``, ``?timeout=abc``) raises
:class:`BadUrl`, not SQLAlchemy's ``ValueError``/``TypeError``.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

_PG_ALIASES = {"postgresql", "postgres"}
_PG_CONNECT_TIMEOUT_S = 5
_UPGRADE_LOCK = threading.Lock()
_MIGRATION_LOCK_KEY = int.from_bytes(b"mixroute", "big") >> 1  # any fixed bigint


class BadUrl(ArgumentError):
    """A database URL that parses but holds a value that cannot be used: a port that is not
    a number, a query value the driver rejects (``?timeout=abc``, ``?check_same_thread=maybe``,
    a parameter given twice). The message is the reason, without the URL (so no password)."""


def normalize_url(url: str | URL) -> URL:
    """Parse ``url`` and pick the psycopg 3 driver for bare PostgreSQL URLs.

    Args:
        url: SQLAlchemy URL, e.g. ``sqlite:///mixroute.db`` or ``postgresql://u@h/db``.

    Returns:
        The parsed URL, ``postgresql+psycopg://...`` for ``postgresql://``/``postgres://``.

    Raises:
        sqlalchemy.exc.ArgumentError: ``url`` is not a URL.
        BadUrl: its port is not a number.
    """
    try:
        parsed = make_url(url)
    except ValueError as exc:  # SQLAlchemy's int() of the port
        raise BadUrl(f"the port is not a number ({exc})") from None
    if parsed.drivername in _PG_ALIASES:
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def safe_url(url: str | URL) -> str:
    """``url`` as text with the password masked, for logs and CLI output."""
    return normalize_url(url).render_as_string(hide_password=True)


#: The first 16 bytes of every SQLite 3 database file (https://www.sqlite.org/fileformat.html).
SQLITE_HEADER = b"SQLite format 3\x00"


def sqlite_path(url: str | URL) -> Path | None:
    """The database file of a SQLite URL; ``None`` for in-memory or non-SQLite URLs."""
    parsed = normalize_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


def sqlite_file_problem(path: Path) -> str | None:
    """Why the SQLite store at ``path`` could never be opened, or ``None`` (a missing file is
    created, in a folder that exists; an empty file is a new database to SQLite). One check
    for ``mixroute serve`` and ``mixroute db upgrade``."""
    if path.is_dir():
        return f"{path} is a folder; name a database file in it (sqlite:///{path / 'mixroute.db'})"
    try:
        with path.open("rb") as fh:
            first = fh.read(len(SQLITE_HEADER))
    except FileNotFoundError:
        if not path.parent.is_dir():  # a typo in the path: the spill journal used to create it
            return f"folder {path.parent} does not exist; create it first or fix the path"
        return None
    except OSError as exc:
        return f"{path} cannot be read: {exc.strerror or exc}"
    if first and first != SQLITE_HEADER:
        return f"{path} is not a SQLite database"
    return None


def missing_sqlite_file(url: str | URL) -> Path | None:
    """The file of a SQLite URL when it does not exist yet (connecting would create an empty
    store there), else ``None``: reading commands refuse such a URL instead of answering
    from a new, empty store."""
    path = sqlite_path(url)
    return path if path is not None and not path.exists() else None


def _json_dumps(value: Any) -> str:
    # default=str: a stray non-JSON value (a set in signals) must not make a row
    # unwritable; the journal uses the same rule. orjson: JSON columns are a large part
    # of the writer's CPU time (bench.store_writer, docs/STORE.md); NaN becomes null.
    try:
        return orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
    except (TypeError, orjson.JSONEncodeError):  # e.g. an int beyond 64 bits
        return json.dumps(value, default=str, separators=(",", ":"))


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    # WAL: readers (dashboard, what-if) do not block the writer and vice versa.
    cur.execute("PRAGMA journal_mode=WAL")
    cur.close()


def _read_only_sqlite(parsed: URL) -> URL:
    """``parsed`` (a SQLite file URL) as SQLite's ``file:`` URI with ``mode=ro``: the file is
    opened read-only, never created, and its journal mode is left as it is."""
    if str(parsed.query.get("uri", "")).lower() in ("true", "1"):  # already a file: URI
        return parsed.update_query_dict({"mode": "ro"})
    uri = Path(parsed.database).resolve().as_uri()  # percent-encodes ?, # and spaces in the path
    return parsed.set(database=uri).update_query_dict({"mode": "ro", "uri": "true"})


def make_engine(url: str | URL, *, read_only: bool = False, **kwargs: Any) -> Engine:
    """Create an engine for the store (no connection is opened here).

    Args:
        url: database URL (normalised with :func:`normalize_url`).
        read_only: for a SQLite file, open it read-only (``mode=ro``) and leave its journal
            mode alone, for commands that only read (``logs export``, ``policy what-if``):
            a missing file raises on connect instead of being created. A file in WAL mode
            (every mixroute store) still gets its ``-wal``/``-shm`` files, as for any reader.
            Other databases are opened as usual.
        **kwargs: passed to :func:`sqlalchemy.create_engine`.

    Raises:
        sqlalchemy.exc.ArgumentError, sqlalchemy.exc.NoSuchModuleError: bad URL or driver.
        BadUrl: a port or query value the driver cannot take.
    """
    parsed = normalize_url(url)
    file_db = parsed.get_backend_name() == "sqlite" and sqlite_path(parsed) is not None
    if read_only and file_db and parsed.query.get("mode") != "memory":
        parsed = _read_only_sqlite(parsed)
    connect_args: dict[str, Any] = dict(kwargs.pop("connect_args", {}))
    if parsed.get_backend_name() == "postgresql" and "connect_timeout" not in parsed.query:
        # Bounded, so a down database turns into a journal spill, not a hung writer.
        connect_args.setdefault("connect_timeout", _PG_CONNECT_TIMEOUT_S)
    try:
        engine = create_engine(parsed, json_serializer=_json_dumps, connect_args=connect_args,
                               pool_pre_ping=True, **kwargs)
    except (ValueError, TypeError) as exc:  # the dialect converts the query's values here
        raise BadUrl(f"a query value the {parsed.get_backend_name()} driver cannot take ({exc})") from None
    if file_db and not read_only:  # a reader must not switch the file to WAL
        event.listen(engine, "connect", _sqlite_pragmas)
    if parsed.get_backend_name() == "postgresql":
        # A batch upsert as multi-row VALUES statements instead of psycopg's one
        # statement per row (pipelined): about 25% more rows/s (bench.store_writer).
        engine.dialect.use_insertmanyvalues_wo_returning = True
    return engine


def alembic_config(url: str | URL | None = None, connection: Any = None) -> Any:
    """An :class:`alembic.config.Config` for the bundled migrations, built in code.

    Args:
        url: database URL; used when no ``connection`` is given.
        connection: an open SQLAlchemy connection to migrate on.
    """
    import migrations
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(Path(migrations.__path__[0])))
    if url is not None:
        cfg.attributes["url"] = normalize_url(url)
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def head() -> str:
    """The head revision id of the bundled migrations."""
    from alembic.script import ScriptDirectory

    rev = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert rev is not None, "migrations package has no revisions"
    return rev


def upgrade(target: str | URL | Engine, revision: str = "head") -> None:
    """Migrate the database to ``revision`` (blocking; run in a thread from async code).

    Args:
        target: database URL, or an engine (the store's own) to migrate with.
        revision: Alembic revision, ``head`` by default.

    Raises:
        sqlalchemy.exc.OperationalError: the database is unreachable.
    """
    from alembic import command

    engine = target if isinstance(target, Engine) else make_engine(target)
    try:
        # Alembic keeps its migration context in module globals: one upgrade per process at a time.
        with _UPGRADE_LOCK, engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                # Replicas starting together migrate one at a time; DDL is transactional
                # there, so the later ones find the database at head and do nothing.
                conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK_KEY})
            command.upgrade(alembic_config(connection=conn), revision)
    finally:
        if engine is not target:
            engine.dispose()


def current(target: str | URL | Engine) -> str | None:
    """The revision the database is at; ``None`` for a database never migrated.

    Raises:
        sqlalchemy.exc.OperationalError: the database is unreachable.
    """
    from alembic.runtime.migration import MigrationContext

    engine = target if isinstance(target, Engine) else make_engine(target)
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        if engine is not target:
            engine.dispose()
