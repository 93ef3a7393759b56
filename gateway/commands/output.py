"""Output files of the offline commands (``--json``, ``--report``, ``--plot``,
``--write-policy``): checked before the work starts, so that a typo does not throw away a
long run, and written with a one-line error instead of a traceback. Where a command takes
``-`` for standard output (:func:`is_stdout`), it writes there instead (:func:`emit`).

Exit status 2 (bad input), as the commands use for other bad arguments.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import typer


def _fail(flag: str, path: Path, why: str) -> None:
    typer.echo(f"error: {flag} {path}: {why}", err=True)
    raise typer.Exit(2)


def check_output(path: Path | None, flag: str) -> None:
    """Exit 2 with one line unless ``path`` looks writable: not a folder, and its nearest
    existing ancestor is a writable folder (missing folders are created on write).

    Raises:
        typer.Exit: the path cannot be written.
    """
    if path is None:
        return
    if path.is_dir():
        _fail(flag, path, "is a folder; give a file name")
    if path.exists() and not path.is_file():
        _fail(flag, path, "exists and is not a regular file (a device, pipe or socket); give a file name")
    ancestor = path.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        _fail(flag, path, f"{ancestor} is not a folder")
    from gateway.store.journal import can_create_in

    if not os.access(ancestor, os.W_OK | os.X_OK) or not can_create_in(ancestor):
        _fail(flag, path, f"folder {ancestor} is not writable")


def write_output(path: Path, flag: str, write: Callable[[Path], object]) -> None:
    """Create ``path``'s folders and call ``write(path)``; an ``OSError`` becomes one line
    and exit status 2.

    Raises:
        typer.Exit: the file could not be written.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write(path)
    except OSError as exc:
        _fail(flag, path, f"cannot write: {exc.strerror or exc}")


def is_stdout(path: Path | None) -> bool:
    """Whether an output option names standard output: ``-``."""
    return path is not None and str(path) == "-"


def emit(path: Path, flag: str, data: bytes) -> None:
    """Write ``data`` to standard output for ``-`` (:func:`is_stdout`), else to the file
    ``path`` (:func:`write_output`).

    Raises:
        typer.Exit: the file could not be written.
    """
    if is_stdout(path):
        stream = typer.get_binary_stream("stdout")
        stream.write(data)
        stream.flush()
    else:
        write_output(path, flag, lambda p: p.write_bytes(data))
