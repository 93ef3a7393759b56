"""``mixroute keys create|list|revoke``: tenant API keys in the store's database.

``keys list`` prints a table on a terminal (ids and prefixes are never cut), tab-separated
rows when stdout is not a terminal (pipes, files), and a JSON array with ``--json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, NoReturn, Optional

import typer

app = typer.Typer(help="Create, list and revoke tenant API keys.", no_args_is_help=True)

DbOption = Annotated[Optional[str], typer.Option("--database-url", help="Store URL (default: MIXROUTE_DATABASE_URL).")]

_COLUMNS = ("key id", "prefix", "tenant", "budget USD", "period", "spent USD", "left USD", "rpm", "tpm", "routes",
            "created", "revoked")


def _engine(database_url: str | None, create: bool = True):
    """An engine on the migrated store; a bad URL or an unreachable database is one line
    (:func:`gateway.commands.db.fail`), never a traceback.

    Args:
        create: whether a SQLite file that does not exist may be created (``keys create``,
            ``tenants set``); the reading commands exit 1 instead, so that a mistyped
            ``--database-url`` is not answered by a new, empty store ("no keys").
    """
    from alembic.util import CommandError
    from sqlalchemy.exc import SQLAlchemyError

    from gateway.commands.db import fail, shown_url
    from gateway.settings import Settings
    from gateway.store.db import make_engine, missing_sqlite_file, upgrade

    url = database_url or Settings().database_url
    try:
        path = None if create else missing_sqlite_file(url)
        if path is not None:
            _error(f"{shown_url(url)}: no database at {path} (check --database-url or MIXROUTE_DATABASE_URL)", 1)
        engine = make_engine(url)
        upgrade(engine)
    except (SQLAlchemyError, ImportError, CommandError) as err:
        fail(url, err)
    return engine


def new_store_note(database_url: str | None) -> str | None:
    """The note to print after a command created a new SQLite store (a key or budget written
    where no gateway reads it never applies, so the user is told where it went), or ``None``
    when the store already exists or is not a SQLite file. Call before :func:`_engine`."""
    from gateway.commands.db import shown_url
    from gateway.settings import Settings
    from gateway.store.db import missing_sqlite_file

    url = database_url or Settings().database_url
    try:
        path = missing_sqlite_file(url)
    except Exception:  # noqa: BLE001  # a bad URL: _engine reports it
        return None
    if path is None:
        return None
    return (f"note: created a new store at {path.resolve()} ({shown_url(url)}); gateways must use the same "
            "MIXROUTE_DATABASE_URL")


def _error(message: str, code: int = 2) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def _check_tenant(tenant: str) -> None:
    """Exit 2 for a tenant name the store must not hold
    (:func:`gateway.auth.admin_ops.check_tenant_name`)."""
    from gateway.auth.admin_ops import check_tenant_name
    from gateway.auth.keys import KeyError_

    try:
        check_tenant_name(tenant, "--tenant")
    except KeyError_ as exc:
        _error(str(exc))


def _check_routes(routes: list[str] | None, policy: Path | None) -> None:
    """Exit 2 (nothing created) when a --routes name is neither a route nor a backend of
    ``policy`` (a key for a route the policy will only gain later: leave out --policy);
    without ``policy`` note that nothing was checked. Exit 2 too for a bad policy, or for a
    name no policy could hold (``auto,best``: names have no commas, the option is
    repeated; such a key could use nothing, and ``keys list`` showed it as two routes)."""
    import re

    from backends.fields import NAME_PATTERN

    if not routes:
        return
    if any(not r.strip() for r in routes):
        _error("--routes must name a route or backend, not an empty string")
    for name in routes:
        if "," in name:
            _error(f"--routes {name!r} is not one route or backend name; repeat the option for each: "
                   + " ".join(f"--routes {part.strip()}" for part in name.split(",") if part.strip()))
        if not re.fullmatch(NAME_PATTERN, name):
            _error(f"--routes {name!r} cannot be a route or backend name (letters, digits and ._:/@-, "
                   "starting with a letter or digit)")
    if policy is None:
        typer.echo("note: --routes are not checked against a policy (pass --policy FILE to check them)", err=True)
        return
    from gateway.commands import load_policy_or_exit

    p = load_policy_or_exit(policy, exit_code=2).policy
    known = [r.name for r in p.routes] + [b.name for b in p.backends]
    unknown = [name for name in routes if name not in known]
    if unknown:
        _error(f"--routes {', '.join(map(repr, unknown))}: not a route or backend of {policy} "
               f"(known: {', '.join(known)}); no key was created (leave out --policy to allow a route "
               "the policy does not have yet)")


def _interactive() -> bool:
    """Whether stdout is a terminal (a table for people) rather than a pipe or file (rows)."""
    return sys.stdout.isatty()


def _usd(value: float | None) -> str:
    """USD for tables: 6 decimals, or 3 significant digits for an amount below a millionth
    (a budget of 1e-7 USD showed as 0.000000)."""
    if value is None:
        return ""
    return f"{value:.6f}" if value == 0 or abs(value) >= 5e-7 else f"{value:.2e}"


@app.command("create")
def create(
    tenant: Annotated[str, typer.Option(help="Tenant name (at most 128 characters).")],
    budget_usd: Annotated[Optional[float], typer.Option(help="USD budget per --period.")] = None,
    period: Annotated[Optional[str], typer.Option(help="Budget period: day, month or total (default month; only with "
                                                 "--budget-usd).")] = None,
    rpm: Annotated[Optional[int], typer.Option(help="Requests per minute.")] = None,
    tpm: Annotated[Optional[int], typer.Option(help="Tokens per minute.")] = None,
    routes: Annotated[Optional[list[str]], typer.Option("--routes", help="Allowed routes/backends (repeat).")] = None,
    policy: Annotated[Optional[Path], typer.Option("--policy", help="Policy file to check --routes against (an unknown name is an error).")] = None,
    database_url: DbOption = None,
) -> None:
    """Create a key; the key itself is printed once, on the last line of stdout."""
    from gateway.auth.admin_ops import create_key
    from gateway.auth.keys import KeyError_

    if period is not None and budget_usd is None:
        _error("--period needs --budget-usd (the period is the budget's)")
    period = period or "month"
    if period not in ("day", "month", "total"):
        _error(f"--period must be day, month or total, got {period!r}")
    _check_tenant(tenant)
    _check_routes(routes, policy)
    note = new_store_note(database_url)
    try:
        engine = _engine(database_url)
        key, info = create_key(engine, tenant, budget_usd=budget_usd, period=period, rpm=rpm, tpm=tpm,
                               routes=routes)
    except KeyError_ as exc:
        _error(str(exc))
    if note:
        typer.echo(note, err=True)
    per = "in total" if period == "total" else f"per {period}"
    parts = [f"budget {_usd(budget_usd)} USD {per}" if budget_usd is not None else None,
             f"{rpm} requests/min" if rpm is not None else None, f"{tpm} tokens/min" if tpm is not None else None]
    limits = ", ".join(p for p in parts if p)
    typer.echo(f"created key {info['key_id']} ({info['prefix']}...) for tenant '{tenant}'"
               + (f" [{limits}]" if limits else ""))
    typer.echo("store it now: it is shown only once")
    typer.echo(key)


def _row(k: dict) -> tuple[str, ...]:
    return (k["key_id"], k["prefix"], k["tenant"], _usd(k["budget_usd"]), k["period"], _usd(k["spent_usd"]),
            _usd(k["left_usd"]), _s(k["rpm"]), _s(k["tpm"]), ",".join(k["routes"]) or "*", _when(k["created_at"]),
            _when(k["revoked_at"]))


def _when(iso: str | None) -> str:
    return "" if iso is None else iso[:16].replace("T", " ")


@app.command("list")
def list_(tenant: Annotated[Optional[str], typer.Option(help="Only this tenant.")] = None,
          all_: Annotated[bool, typer.Option("--all", help="Include revoked keys.")] = False,
          as_json: Annotated[bool, typer.Option("--json", help="Print a JSON array of keys.")] = False,
          database_url: DbOption = None) -> None:
    """List keys (ids and prefixes, never the keys) with spend and budget left this period: a
    table on a terminal, tab-separated rows otherwise, JSON with --json."""
    from gateway.auth.admin_ops import list_key_views

    keys = list_key_views(_engine(database_url, create=False), tenant, include_revoked=all_)
    if as_json:
        typer.echo(json.dumps(keys, indent=2))
        return
    if not _interactive():
        for row in (_COLUMNS, *map(_row, keys)):
            typer.echo("\t".join(row))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table()
    for name in _COLUMNS:
        # Copied into `keys revoke`: never cut or wrapped, however narrow the terminal
        # (min_width: 12-character ids, 8-character prefixes, see gateway.auth.keys).
        whole = {"key id": 12, "prefix": 8}.get(name)
        table.add_column(name, no_wrap=whole is not None, overflow="fold", min_width=whole)
    for k in keys:
        table.add_row(*_row(k))
    Console().print(table)


@app.command("revoke")
def revoke(key: Annotated[str, typer.Argument(help="Key id or display prefix.")],
           database_url: DbOption = None) -> None:
    """Revoke a key (takes effect on every gateway within the key cache TTL, 5 s)."""
    from gateway.auth.admin_ops import NotFound, revoke_key
    from gateway.auth.keys import KeyError_

    try:
        revoke_key(_engine(database_url, create=False), key)
    except KeyError_ as exc:
        _error(str(exc))
    except NotFound:
        _error(f"no active key '{key}'", 1)
    typer.echo(f"revoked {key}")


@app.command("update")
def update(key_id: Annotated[str, typer.Argument(help="Key id.")],
           budget_usd: Annotated[Optional[float], typer.Option(help="New USD budget per period.")] = None,
           no_budget: Annotated[bool, typer.Option("--no-budget", help="Remove the key's budget.")] = False,
           period: Annotated[Optional[str], typer.Option(help="day, month or total.")] = None,
           rpm: Annotated[Optional[int], typer.Option(help="Requests per minute.")] = None,
           tpm: Annotated[Optional[int], typer.Option(help="Tokens per minute.")] = None,
           routes: Annotated[Optional[list[str]], typer.Option("--routes", help="Allowed routes (repeat); "
                                                               "replaces the list.")] = None,
           database_url: DbOption = None) -> None:
    """Change a key's limits (the same operation as PATCH /v1/admin/keys/{id}); gateways apply
    it within the key cache TTL."""
    from gateway.auth.admin_ops import NotFound, update_key
    from gateway.auth.keys import KeyError_

    changes = {name: value for name, value in (("budget_usd", budget_usd), ("period", period), ("rpm", rpm),
                                               ("tpm", tpm), ("routes", routes)) if value is not None}
    if no_budget:
        if budget_usd is not None:
            _error("--no-budget contradicts --budget-usd")
        changes["budget_usd"] = None
    if not changes:
        _error("nothing to change: give --budget-usd, --no-budget, --period, --rpm, --tpm or --routes")
    try:
        view = update_key(_engine(database_url, create=False), key_id, changes)
    except KeyError_ as exc:
        _error(str(exc))
    except NotFound as exc:
        _error(str(exc), 1)
    typer.echo(json.dumps(view, indent=2))


def _s(value) -> str:
    return "" if value is None else str(value)
