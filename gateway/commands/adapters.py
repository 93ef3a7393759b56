"""``mixroute adapters list|promote|rollback|events``: switch the adapter version gateways use.

The versions live in ``MIXROUTE_ADAPTERS_DIR`` (:mod:`router.learning.versions`); running
gateways poll its ``active.json`` every ``MIXROUTE_ADAPTERS_POLL_S`` seconds and swap to
the version it names without dropping requests (:mod:`gateway.adapters`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

app = typer.Typer(help="Adapter versions: list them, promote one, roll back, show the events.",
                  no_args_is_help=True)

DirOption = Annotated[Optional[Path], typer.Option("--dir", help="Versions folder (default: MIXROUTE_ADAPTERS_DIR, "
                                                   "else ~/.local/share/mixroute/adapters).")]


def _versions(folder: Path | None):
    from router.classify import default_adapters_dir
    from router.learning.versions import Versions, default_dir

    if folder is None:
        from pydantic import ValidationError

        from gateway.settings import Settings

        try:
            folder = Settings().adapters_dir
        except ValidationError:
            folder = None  # another setting is invalid; the folder's own variable is read below
        if folder is None:
            import os

            folder = Path(os.environ["MIXROUTE_ADAPTERS_DIR"]) if os.environ.get("MIXROUTE_ADAPTERS_DIR") \
                else default_dir()
    return Versions(folder, shipped_heads=default_adapters_dir())


def _fail(message: str, code: int = 1) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


@app.command("list")
def list_(folder: DirOption = None,
          as_json: Annotated[bool, typer.Option("--json", help="One JSON object per version.")] = False) -> None:
    """Every version (oldest first), the active one marked with *."""
    from router.learning.versions import VersionError

    versions = _versions(folder)
    try:
        active = versions.active().version
    except VersionError as exc:
        _fail(str(exc))
    for vid in versions.ids():
        try:
            info = versions.info(vid)
            heads = versions.heads(vid)[0]
        except VersionError as exc:
            typer.echo(f"{'*' if vid == active else ' '} {vid}  (unusable: {exc})")
            continue
        if as_json:
            typer.echo(json.dumps({"version": vid, "active": vid == active, "heads": heads, **vars(info)}))
            continue
        mark = "*" if vid == active else " "
        extra = f"  from {info.parent}" if info.parent else ""
        typer.echo(f"{mark} {vid:<24} {(info.created_at or '-')[:19]:<19}  {info.source:<8} heads {heads}{extra}")


@app.command("promote")
def promote(version: Annotated[str, typer.Argument(help="Version id (see `mixroute adapters list`).")],
            folder: DirOption = None) -> None:
    """Make VERSION the active one; gateways switch at their next poll."""
    from router.learning.versions import VersionError

    versions = _versions(folder)
    try:
        old = versions.active().version
        _check_loadable(versions, version)
        versions.promote(version, by="cli")
    except VersionError as exc:
        _fail(str(exc))
    typer.echo(f"promoted {version} (was {old}); gateways switch within MIXROUTE_ADAPTERS_POLL_S")


def _check_loadable(versions, version: str) -> None:
    """What a gateway reads of ``version`` without loading a model: its description, its
    parents, its correction, and a ``config.json`` in each of its own head folders.

    Raises:
        VersionError: one line saying what is wrong (the pointer is not touched).
    """
    from router.learning.baked import OUTCOMES_FILE, Baked, BakedError
    from router.learning.versions import VersionError

    versions.info(version)
    heads_version, heads = versions.heads(version)
    own = versions.folder(version)
    if own is not None and (own / OUTCOMES_FILE).is_file():
        try:
            Baked.load(own / OUTCOMES_FILE)
        except BakedError as exc:
            raise VersionError(f"adapter version {version!r} cannot be loaded: {exc}") from None
    if heads_version != "shipped" and heads is not None and not any((p / "config.json").is_file()
                                                                    for p in heads.iterdir() if p.is_dir()):
        raise VersionError(f"adapter version {version!r} cannot be loaded: {heads} holds no head folder "
                           "(each with a config.json)")


@app.command("rollback")
def rollback(folder: DirOption = None) -> None:
    """Make the version active before the current one active again."""
    from router.learning.versions import VersionError

    versions = _versions(folder)
    try:
        old = versions.active().version
        new = versions.rollback(by="cli")
    except VersionError as exc:
        _fail(str(exc))
    typer.echo(f"rolled back {old} -> {new.version}")


@app.command("events")
def events(folder: DirOption = None,
           limit: Annotated[int, typer.Option(min=1, help="The newest this many.")] = 50,
           as_json: Annotated[bool, typer.Option("--json", help="The events as JSON lines.")] = False) -> None:
    """Promotions and rollbacks (automatic ones by the guard included), oldest first."""
    for e in _versions(folder).events(limit):
        if as_json:
            typer.echo(json.dumps(e, sort_keys=True))
            continue
        why = f"  ({e['reason']})" if e.get("reason") else ""
        typer.echo(f"{e.get('at', '?')}  {e.get('event', '?'):<13} {e.get('from', '?')} -> {e.get('version', '?')}"
                   f"  by {e.get('by', '?')}{why}")
