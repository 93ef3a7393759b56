"""``mixroute db``: migrations of the decision/outcome store.

Imports of SQLAlchemy and Alembic happen inside the commands so ``mixroute --help``
stays fast. Every failure is one line on stderr, never a traceback (:func:`fail`): exit 2
for what the caller got wrong (a URL that does not parse, names no known database kind or
holds a port or query value that cannot be used, an unknown ``--revision``), exit 1 for the
environment (driver not installed, database unreachable).
"""

from __future__ import annotations

import re
from typing import Annotated, NoReturn, Optional

import typer

app = typer.Typer(help="Database migrations for the store.", no_args_is_help=True)

DatabaseUrl = Annotated[
    Optional[str],
    typer.Option("--database-url", help="Store URL (default: MIXROUTE_DATABASE_URL or sqlite:///mixroute.db)."),
]

_EXAMPLES = "e.g. sqlite:///mixroute.db or postgresql://user:password@host:5432/db"
_DRIVER_HINTS = {"psycopg": "pip install 'mixroute[postgres]'",
                 "MySQLdb": "pip install mysqlclient, or name another driver: mysql+pymysql://..."}
_PASSWORD = re.compile(r"(://[^:/@]*:)[^@]*@")


def _url(database_url: str | None) -> str:
    if database_url:
        return database_url
    from gateway.settings import Settings

    return Settings().database_url


def shown_url(url: str) -> str:
    """``url`` for messages: password masked, also when the URL does not parse."""
    from sqlalchemy.exc import ArgumentError

    from gateway.store.db import safe_url

    try:
        return safe_url(url)
    except ArgumentError:
        return _PASSWORD.sub(r"\1***@", url)


def _first_line(err: BaseException) -> str:
    text = str(getattr(err, "orig", None) or err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def fail(url: str, err: BaseException, action: str = "") -> NoReturn:
    """Print one line for ``err`` (raised while using the store at ``url``) and exit.

    Args:
        url: the store URL (its password is never printed).
        err: a SQLAlchemy error (:class:`gateway.store.db.BadUrl` included), an
            ``ImportError`` of a database driver or an Alembic ``CommandError``; anything
            else is re-raised.
        action: prefix of the message, e.g. ``"upgrade failed: "``.

    Raises:
        typer.Exit: code 2 for a bad URL or revision, 1 for a missing driver or an
            unreachable database.
    """
    from alembic.util import CommandError
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError, SQLAlchemyError

    from gateway.store.db import BadUrl

    shown, code = shown_url(url), 1
    if isinstance(err, BadUrl):
        msg, code = f"--database-url: bad URL {shown!r}: {err}", 2
    elif isinstance(err, NoSuchModuleError):
        kind = url.split("://", 1)[0]
        msg, code = f"unknown database kind {kind!r} in {shown!r} ({_EXAMPLES})", 2
    elif isinstance(err, ArgumentError):
        msg, code = f"{shown!r} is not a database URL ({_EXAMPLES})", 2
    elif isinstance(err, ImportError):
        module = err.name or _first_line(err)
        hint = _DRIVER_HINTS.get(module, f"install the Python package providing {module!r}, or use another driver")
        msg = f"{shown}: the database driver {module!r} is not installed ({hint})"
    elif isinstance(err, CommandError):
        msg, code = f"{shown}: {action}{_first_line(err)}", 2
    elif isinstance(err, SQLAlchemyError):
        msg = f"{shown}: {action}{type(err).__name__}: {_first_line(err)}"
    else:
        raise err
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(code)


@app.command()
def upgrade(
    database_url: DatabaseUrl = None,
    revision: Annotated[str, typer.Option(help="Target Alembic revision (0001, 0002, ... or head).")] = "head",
) -> None:
    """Migrate the store database to the --revision given (default: head)."""
    from alembic.util import CommandError
    from sqlalchemy.exc import SQLAlchemyError

    from gateway.store import db

    url = _url(database_url)
    if _in_memory_sqlite(url):
        typer.echo(f"error: {url}: an in-memory SQLite database ends with this command, so migrating it keeps "
                   "nothing; give a file (sqlite:///path/mixroute.db)", err=True)
        raise typer.Exit(2)
    try:
        known = _check_revision(revision)
        path = db.sqlite_path(url)
        problem = db.sqlite_file_problem(path) if path is not None else None
        if problem:  # SQLite's own word for these is "unable to open database file"
            typer.echo(f"error: {shown_url(url)}: {problem}", err=True)
            raise typer.Exit(2)
        at = db.current(url)
        if revision != "head" and at in known and known.index(at) > known.index(revision):
            # Alembic's upgrade to an older revision is a no-op that printed "at revision <newer>".
            raise CommandError(f"the database is at revision {at}, past {revision}: `db upgrade` does not downgrade")
        db.upgrade(url, revision)
        rev = db.current(url)
    except (SQLAlchemyError, ImportError, CommandError) as err:
        fail(url, err, "upgrade failed: ")
    typer.echo(f"{db.safe_url(url)}: at revision {rev}")


def _in_memory_sqlite(url: str) -> bool:
    """``sqlite://``, ``sqlite:///:memory:`` or a ``mode=memory`` URI (a URL that does not
    parse is left to the command's own error)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError:
        return False
    return parsed.get_backend_name() == "sqlite" and (parsed.database in (None, "", ":memory:")
                                                      or parsed.query.get("mode") == "memory")


def _check_revision(revision: str) -> list[str]:
    """The known revisions, oldest first; raises ``alembic.util.CommandError`` naming them
    for an unknown one, before any connection is made."""
    from alembic.script import ScriptDirectory
    from alembic.util import CommandError

    from gateway.store.db import alembic_config

    script = ScriptDirectory.from_config(alembic_config())
    known = [r.revision for r in reversed(list(script.walk_revisions()))]
    # Only the revision ids and `head`: Alembic's other forms (`base`, `-1`, `0005@head`, an
    # empty string) name downgrades or branches this command does not do, and some crashed it.
    if revision != "head" and revision not in known:
        raise CommandError(f"unknown revision {revision!r} (known: {', '.join(known)}, head)")
    return known


@app.command()
def current(database_url: DatabaseUrl = None) -> None:
    """Print the revision the store database is at (`none` if never migrated) and the head."""
    from sqlalchemy.exc import SQLAlchemyError

    from gateway.store import db

    url = _url(database_url)
    try:
        path = db.missing_sqlite_file(url)
        if path is not None:
            typer.echo(f"none (no database at {path}; head is {db.head()})")
            return
        rev = db.current(url)
    except (SQLAlchemyError, ImportError) as err:
        fail(url, err)
    head = db.head()
    state = "up to date" if rev == head else f"head is {head}"
    typer.echo(f"{rev or 'none'} ({state})")
