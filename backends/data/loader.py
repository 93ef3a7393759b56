"""``load(path)``: one outcome dataset from a file or a folder, format detected from
content (see :mod:`backends.data.detect`).

A file is one dataset named after its stem. A folder is one dataset named after the
folder, holding the rows of all its data files in name order (not recursive); the files
must share one format and one model set. ``contaminated_prompts.jsonl``, licence and
readme files and hidden files in a folder are not data files.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from backends.data.detect import detect
from backends.data.mt_bench import load_mt_bench
from backends.data.routellm import CONTAMINATED_FILE, load_routellm_csv
from backends.data.routerbench import load_routerbench_csv
from backends.data.routerdc import load_routerdc_json
from backends.data.types import DataFormatError, Dataset

_LOADERS: dict[str, Callable[[Path], Dataset]] = {
    "routellm_csv": load_routellm_csv,
    "routerbench_csv": load_routerbench_csv,
    "routerdc_json": load_routerdc_json,
    "mt_bench": load_mt_bench,
}
_NOT_DATA_SUFFIXES = {".md", ".txt", ".rst", ".py", ".yaml", ".yml"}


def load(path: str | Path) -> Dataset:
    """Load the outcome dataset at ``path`` (file or folder).

    Returns:
        The :class:`Dataset`; every row has a score for every model.

    Raises:
        DataFormatError: missing path, unknown format, malformed content, an empty
            folder, or folder files with different formats or model sets.
    """
    path = Path(path)
    fmt = detect(path)
    if fmt == "folder":
        return _load_folder(path)
    try:
        return _LOADERS[fmt](path)
    except UnicodeDecodeError as exc:
        raise DataFormatError(path, f"not UTF-8 text: {exc.reason} at byte {exc.start}") from None
    except OSError as exc:
        raise DataFormatError(path, f"cannot read: {exc.strerror or exc}") from None


def is_data_file(path: Path) -> bool:
    """Whether a file in a data folder is loaded as data (see module docstring)."""
    name = path.name
    return (path.is_file() and not name.startswith(".") and name != CONTAMINATED_FILE
            and not name.upper().startswith(("LICENSE", "LICENCE", "README", "NOTICE"))
            and path.suffix.lower() not in _NOT_DATA_SUFFIXES)


def sniff(path: str | Path) -> None:
    """The cheap part of :func:`load`'s checks: the format of ``path`` (each data file of a
    folder) from its first bytes, and that a folder holds data files. Content errors
    deeper in a file surface only in :func:`load`.

    Raises:
        DataFormatError: as :func:`load` would for these.
    """
    path = Path(path)
    if detect(path) == "folder":
        for f in _data_files(path):
            detect(f)


def _data_files(folder: Path) -> list[Path]:
    files = sorted(p for p in folder.iterdir() if is_data_file(p))
    if not files:
        raise DataFormatError(folder, "no outcome data files in the folder")
    return files


def _load_folder(folder: Path) -> Dataset:
    files = _data_files(folder)
    parts = [load(f) for f in files]
    first = parts[0]
    for f, part in zip(files[1:], parts[1:]):
        if part.format != first.format:
            raise DataFormatError(f, f"format {part.format} differs from {files[0].name}'s {first.format}; "
                                     "a folder must hold one format")
        if set(part.models) != set(first.models):
            raise DataFormatError(f, f"models {sorted(part.models)} differ from {files[0].name}'s "
                                     f"{sorted(first.models)}; a folder must hold one model set")
    dropped: dict[str, int] = {}
    for part in parts:
        for k, v in part.dropped.items():
            dropped[k] = dropped.get(k, 0) + v
    return Dataset(name=folder.name, format=first.format, models=list(first.models),
                   rows=[r for part in parts for r in part.rows], dropped=dropped)
