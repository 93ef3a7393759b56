"""``mixroute tenants set|list|delete``: a tenant's own USD budget, shared by all its keys
(the operations of :mod:`gateway.auth.admin_ops`, as the admin API runs them)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

app = typer.Typer(help="Tenant budgets (USD per period, across all of a tenant's keys).", no_args_is_help=True)


@app.command("set")
def set_(
    tenant: Annotated[str, typer.Argument(help="Tenant name (as given to `keys create --tenant`).")],
    budget_usd: Annotated[Optional[float], typer.Option(help="USD budget per --period; omit to remove it.")] = None,
    period: Annotated[Optional[str], typer.Option(help="day, month or total (default month; only with --budget-usd).")] = None,
    database_url: Annotated[Optional[str], typer.Option(help="Store URL (default: MIXROUTE_DATABASE_URL).")] = None,
) -> None:
    """Set (or, without --budget-usd, remove) a tenant's budget; gateways apply it within the key cache TTL."""
    from gateway.auth.admin_ops import put_tenant
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
    try:
        engine = _engine(database_url)
        if budget_usd is None:
            set_tenant_budget(engine, tenant, None)  # removes the record: `tenants list` drops it
        else:
            put_tenant(engine, tenant, budget_usd, period)
    except KeyError_ as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)
    if note:
        typer.echo(note, err=True)
    per = "in total" if period == "total" else f"per {period}"
    what = f"{_usd(budget_usd)} USD {per}" if budget_usd is not None else "no budget"
    typer.echo(f"tenant '{tenant}': {what}")


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
