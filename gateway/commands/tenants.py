"""``mixroute tenants set|list|delete``: a tenant's own limits (USD budget, requests and tokens
per minute, allowed routes), shared by all its keys
(the operations of :mod:`gateway.auth.admin_ops`, as the admin API runs them)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

app = typer.Typer(help="Tenant limits (budget, rpm, tpm, routes), across all of a tenant's keys.",
                  no_args_is_help=True)


@app.command("set")
def set_(
    tenant: Annotated[str, typer.Argument(help="Tenant name (as given to `keys create --tenant`).")],
    budget_usd: Annotated[Optional[float], typer.Option(help="USD budget per --period.")] = None,
    period: Annotated[Optional[str], typer.Option(help="day, month or total (default month; only with --budget-usd).")] = None,
    rpm: Annotated[Optional[int], typer.Option(help="Requests per minute, across the tenant's keys.")] = None,
    tpm: Annotated[Optional[int], typer.Option(help="Tokens per minute, across the tenant's keys.")] = None,
    routes: Annotated[Optional[list[str]], typer.Option("--routes", help="Routes/backends the tenant's keys may "
                                                        "use (repeat).")] = None,
    database_url: Annotated[Optional[str], typer.Option(help="Store URL (default: MIXROUTE_DATABASE_URL).")] = None,
) -> None:
    """Set a tenant's limits, replacing the ones it had (with none of the options: remove its
    record); gateways apply them within the key cache TTL."""
    from gateway.auth.admin_ops import TenantLimits, put_tenant
    from gateway.auth.keys import KeyError_, set_tenant_budget
    from gateway.commands.keys import _check_tenant, _engine, _usd, new_store_note

    _check_tenant(tenant)

    if period is not None and budget_usd is None:
        # Without a budget the command removes it: a lone --period used to wipe the amount.
        typer.echo("error: --period needs --budget-usd (set both to change the period; leave out both to remove "
                   "the budget)", err=True)
        raise typer.Exit(2)
    period = period or "month"
    if period not in ("day", "month", "total"):
        typer.echo(f"error: --period must be day, month or total, got {period!r}", err=True)
        raise typer.Exit(2)
    note = new_store_note(database_url)
    limits = TenantLimits(budget_usd, period, rpm, tpm, tuple(routes or ()))
    try:
        engine = _engine(database_url)
        if limits == TenantLimits(period=period):
            set_tenant_budget(engine, tenant, None)  # nothing left to hold: the record goes, `tenants list` drops it
        else:
            put_tenant(engine, tenant, limits)
    except KeyError_ as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)
    if note:
        typer.echo(note, err=True)
    per = "in total" if period == "total" else f"per {period}"
    parts = [f"{_usd(budget_usd)} USD {per}" if budget_usd is not None else "no budget",
             f"{rpm} requests/min" if rpm is not None else None, f"{tpm} tokens/min" if tpm is not None else None,
             f"routes {', '.join(routes)}" if routes else None]
    typer.echo(f"tenant '{tenant}': {', '.join(p for p in parts if p)}")


@app.command("list")
def list_(database_url: Annotated[Optional[str], typer.Option(help="Store URL.")] = None,
          as_json: Annotated[bool, typer.Option("--json", help="Print a JSON array.")] = False) -> None:
    """Tenants with a budget record or an active key: name, budget, period, spent and left
    this period (tab-separated; left is empty without a tenant budget)."""
    import json

    from gateway.auth.admin_ops import list_tenant_views
    from gateway.commands.keys import _engine, _usd

    views = list_tenant_views(_engine(database_url, create=False))
    if as_json:
        typer.echo(json.dumps(views, indent=2))
        return
    for t in views:
        typer.echo("\t".join((t["name"], _usd(t["budget_usd"]), t["period"], _usd(t["spent_usd"]),
                              _usd(t["left_usd"]))))


@app.command("delete")
def delete(tenant: Annotated[str, typer.Argument(help="Tenant name.")],
           database_url: Annotated[Optional[str], typer.Option(help="Store URL.")] = None) -> None:
    """Revoke every key of the tenant and remove its budget."""
    from gateway.auth.admin_ops import NotFound, delete_tenant
    from gateway.commands.keys import _engine

    try:
        delete_tenant(_engine(database_url, create=False), tenant)
    except NotFound as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1)
    typer.echo(f"tenant '{tenant}': keys revoked, budget removed")
