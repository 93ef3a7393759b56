"""``mixroute db``: migrations of the decision/outcome store.

Imports of SQLAlchemy and Alembic happen inside the commands so ``mixroute --help``
stays fast.
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

app = typer.Typer(help="Database migrations for the store.", no_args_is_help=True)

DatabaseUrl = Annotated[
    Optional[str],
    typer.Option("--database-url", help="Store URL (default: MIXROUTE_DATABASE_URL or sqlite:///mixroute.db)."),
]


def _url(database_url: str | None) -> str:
    if database_url:
        return database_url
    from gateway.settings import Settings

    return Settings().database_url


@app.command()
def upgrade(
    database_url: DatabaseUrl = None,
    revision: Annotated[str, typer.Option(help="Target Alembic revision.")] = "head",
) -> None:
    """Migrate the store database to REVISION (default: head)."""
    from sqlalchemy.exc import SQLAlchemyError

    from gateway.store import db

    url = _url(database_url)
    try:
        db.upgrade(url, revision)
        rev = db.current(url)
    except SQLAlchemyError as err:
        typer.echo(f"{db.safe_url(url)}: upgrade failed: {type(err).__name__}: {getattr(err, 'orig', None) or err}",
                   err=True)
        raise typer.Exit(1)
    typer.echo(f"{db.safe_url(url)}: at revision {rev}")


@app.command()
def current(database_url: DatabaseUrl = None) -> None:
    """Print the revision the store database is at (`none` if never migrated) and the head."""
    from sqlalchemy.exc import SQLAlchemyError

    from gateway.store import db

    url = _url(database_url)
    try:
        rev = db.current(url)
    except SQLAlchemyError as err:
        typer.echo(f"{db.safe_url(url)}: {type(err).__name__}: {getattr(err, 'orig', None) or err}", err=True)
        raise typer.Exit(1)
    head = db.head()
    state = "up to date" if rev == head else f"head is {head}"
    typer.echo(f"{rev or 'none'} ({state})")
