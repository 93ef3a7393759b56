"""``mixroute keys create|list|revoke``: tenant API keys in the store's database."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

app = typer.Typer(help="Create, list and revoke tenant API keys.", no_args_is_help=True)

DbOption = Annotated[Optional[str], typer.Option("--database-url", help="Store URL (default: MIXROUTE_DATABASE_URL).")]


def _engine(database_url: str | None):
    from gateway.settings import Settings
    from gateway.store.db import make_engine, upgrade

    engine = make_engine(database_url or Settings().database_url)
    upgrade(engine)
    return engine


@app.command("create")
def create(
    tenant: Annotated[str, typer.Option(help="Tenant name.")],
    budget_usd: Annotated[Optional[float], typer.Option(help="USD budget per --period.")] = None,
    period: Annotated[str, typer.Option(help="Budget period: day, month or total.")] = "month",
    rpm: Annotated[Optional[int], typer.Option(help="Requests per minute.")] = None,
    tpm: Annotated[Optional[int], typer.Option(help="Tokens per minute.")] = None,
    routes: Annotated[Optional[list[str]], typer.Option("--routes", help="Allowed routes/backends (repeat).")] = None,
    database_url: DbOption = None,
) -> None:
    """Create a key; the key itself is printed once, on the last line of stdout."""
    from gateway.auth.keys import KeyError_, create_key

    if period not in ("day", "month", "total"):
        typer.echo(f"error: --period must be day, month or total, got {period!r}", err=True)
        raise typer.Exit(2)
    try:
        engine = _engine(database_url)
        key, info = create_key(engine, tenant, budget_usd=budget_usd, period=period, rpm=rpm, tpm=tpm,
                               routes=routes)
    except KeyError_ as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)
    limits = ", ".join(f"{k}={v}" for k, v in (("budget_usd", budget_usd), ("rpm", rpm), ("tpm", tpm)) if v is not None)
    typer.echo(f"created key {info.key_id} ({info.prefix}...) for tenant '{tenant}'"
               + (f" [{limits} per {period}]" if budget_usd is not None else (f" [{limits}]" if limits else "")))
    typer.echo("store it now: it is shown only once")
    typer.echo(key)


@app.command("list")
def list_(tenant: Annotated[Optional[str], typer.Option(help="Only this tenant.")] = None,
          all_: Annotated[bool, typer.Option("--all", help="Include revoked keys.")] = False,
          database_url: DbOption = None) -> None:
    """List keys (ids and prefixes, never the keys)."""
    from rich.console import Console
    from rich.table import Table

    from gateway.auth.keys import list_keys

    table = Table("key id", "prefix", "tenant", "budget USD", "period", "rpm", "tpm", "routes", "created", "revoked")
    for k in list_keys(_engine(database_url), tenant, include_revoked=all_):
        table.add_row(k.key_id, k.prefix, k.tenant, _s(k.budget_usd), k.period, _s(k.rpm), _s(k.tpm),
                      ",".join(k.routes) or "*", f"{k.created_at:%Y-%m-%d %H:%M}",
                      f"{k.revoked_at:%Y-%m-%d %H:%M}" if k.revoked_at else "")
    Console().print(table)


@app.command("revoke")
def revoke(key: Annotated[str, typer.Argument(help="Key id or display prefix.")], database_url: DbOption = None) -> None:
    """Revoke a key (takes effect on every gateway within the key cache TTL, 5 s)."""
    from gateway.auth.keys import KeyError_, revoke_key

    try:
        n = revoke_key(_engine(database_url), key)
    except KeyError_ as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)
    if not n:
        typer.echo(f"error: no active key '{key}'", err=True)
        raise typer.Exit(1)
    typer.echo(f"revoked {key}")


def _s(value) -> str:
    return "" if value is None else str(value)
