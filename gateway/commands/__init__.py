"""CLI sub-commands registered in :mod:`gateway.cli` (one module per command group)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from router.policy import LoadedPolicy


def load_policy_or_exit(path: str | Path, exit_code: int = 1) -> "LoadedPolicy":
    """Load a policy file for a command; on error print one ``FILE:LINE path: problem`` line
    per problem (each ending in a newline) to stderr and exit with ``exit_code`` (a
    ``typer.Exit``)."""
    import typer

    from router.policy import PolicyError, load_policy

    try:
        return load_policy(path)
    except PolicyError as exc:
        for line in exc.lines():
            typer.echo(line, err=True)
        raise typer.Exit(exit_code) from None


def require_modules(command: str, extra: str, *modules: str) -> None:
    """Exit with one line naming the extra to install when a module ``command`` imports is
    missing (e.g. numpy after a plain ``pip install mixroute``), instead of the traceback of
    its first import; exit status 1, as ``mixroute train`` without torch."""
    import importlib.util

    import typer

    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        typer.echo(f"error: {command} needs the {extra} extra (no module named {missing[0]!r}); "
                   f"pip install 'mixroute[{extra}]'", err=True)
        raise typer.Exit(1)
