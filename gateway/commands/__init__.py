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
