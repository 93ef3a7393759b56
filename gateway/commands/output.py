"""Output files of the offline commands (``--json``, ``--report``, ``--plot``,
``--write-policy``, ``logs export``'s OUT): checked before the work starts, so that a typo
does not throw away a long run (:func:`check_output`) and an output that is one of the
command's own input files does not overwrite it (:func:`check_not_input`), and written with
a one-line error instead of a traceback. Where a command takes ``-`` for standard output
(:func:`is_stdout`), it writes there instead (:func:`emit`). Input path options are read
as text and turned into paths by :func:`paths_of` / :func:`path_of`, which refuse an empty
value (typer reads ``''`` as ``Path('.')``: the current folder).

Exit status 2 (bad input), as the commands use for other bad arguments.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

import typer


def _fail(flag: str, path: Path, why: str) -> None:
    typer.echo(f"error: {flag} {path}: {why}", err=True)
    raise typer.Exit(2)


def paths_of(values: Iterable[str] | None, flag: str, want: str) -> list[Path]:
    """The values of the path option ``flag``, read as text (not ``Path``: typer turns ``''``
    into ``Path('.')``, so an empty value would silently name the current folder), as paths.
    ``want`` says what to give instead, e.g. ``"an outcome data file or folder (. for the
    current folder)"``. ``None`` (not given) is no paths.

    Raises:
        typer.Exit: a value is empty (exit status 2, one line).
    """
    values = list(values or [])
    if "" in values:
        typer.echo(f"error: {flag} '': an empty path; give {want}", err=True)
        raise typer.Exit(2)
    return [Path(v) for v in values]


def path_of(value: str | None, flag: str, want: str) -> Path | None:
    """:func:`paths_of` for an option given at most once: ``None`` when not given.

    Raises:
        typer.Exit: the value is empty.
    """
    return None if value is None else paths_of([value], flag, want)[0]


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


def same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` name one file: when both exist, :func:`os.path.samefile` (the
    same device and inode, so also through a symbolic link or a hard link); otherwise the
    same resolved path (e.g. a store's ``-wal`` file, which SQLite creates only once the
    store is opened)."""
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):  # one is missing or unreadable, or a NUL in a name
        pass
    try:
        return Path(a).resolve() == Path(b).resolve()
    except (OSError, RuntimeError, ValueError):  # a symbolic link loop
        return False


def check_not_input(outputs: Iterable[tuple[Path | None, str]], inputs: Iterable[tuple[Path, str]]) -> None:
    """Exit 2 with one line when an output is the same file as one of the command's inputs
    (:func:`same_file`): writing it would destroy the input the command is reading, e.g.
    ``mixroute eval --test g.csv --json g.csv``. Checked before the work starts.

    Args:
        outputs: ``(path, flag)`` of each output; ``None`` (not asked for) and ``-``
            (standard output) are skipped.
        inputs: ``(file, flag)`` of each file the command reads (the files inside a data
            folder each on their own, with the folder's flag).

    Raises:
        typer.Exit: an output is an input file.
    """
    wanted = [(path, flag) for path, flag in outputs if path is not None and not is_stdout(path)]
    if not wanted:
        return
    for file, in_flag in inputs:
        for path, flag in wanted:
            if same_file(path, file):
                _fail(flag, path, f"is an input file of this command ({in_flag} {file}); writing it would "
                                  "destroy that input: give another file name")


def check_not_repeated(paths: list[Path], flag: str, why: str) -> None:
    """Exit 2 with one line when two of ``paths`` (the values of the repeatable ``flag``)
    name one file or folder (:func:`same_file`: also through a
    symbolic or hard link, or another spelling of the path); ``why`` says what that would do.

    Raises:
        typer.Exit: a path is given twice.
    """
    for i, path in enumerate(paths):
        for earlier in paths[:i]:
            if same_file(earlier, path):
                what = "folder" if Path(path).is_dir() else "file"
                typer.echo(f"error: {flag} {path}: the same {what} as {flag} {earlier} (given twice); {why}: give it "
                           "once", err=True)
                raise typer.Exit(2)


def data_inputs(paths: Iterable[Path], flag: str) -> list[tuple[Path, str]]:
    """``(file, flag)`` of every file outcome data ``paths`` are read from, for
    :func:`check_not_input`: a file as given, a folder's data files
    (:func:`router.eval.data.data_files`)."""
    from router.eval.data import data_files

    out = []
    for path in map(Path, paths):
        if not path.is_dir():
            out.append((path, flag))
            continue
        root = path.resolve()
        for f in sorted(data_files(path)):  # named under the folder as given, as the user wrote it
            out.append((path / f.relative_to(root) if f.is_relative_to(root) else f, flag))
    return out


def folder_inputs(folder: Path | None, flag: str) -> list[tuple[Path, str]]:
    """``(file, flag)`` of every file under ``folder`` (e.g. a heads folder), for
    :func:`check_not_input`; ``folder`` itself when it is not a folder."""
    if folder is None:
        return []
    if not folder.is_dir():
        return [(folder, flag)]
    return [(f, flag) for f in folder.rglob("*") if f.is_file()]


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
