"""Which outcome-data format a path holds, decided from its content (never from the
file extension alone).

Rules, in order:

1. A folder holding ``question.jsonl`` and ``judgements.jsonl`` is a RouteLLM MT-Bench
   folder (``mt_bench``); any other folder is a folder of data files (``folder``).
2. A file whose first non-blank character is ``[`` is a JSON array: RouterDC
   (``routerdc_json``) when its first 256 KiB mention ``question`` and ``scores`` keys.
3. A file whose first non-blank character is ``{`` is JSON lines: never a dataset on its
   own (a contaminated-prompt list or one half of an MT-Bench folder); the error says so.
4. Otherwise the first line is read as a CSV header, which must have a ``prompt`` column:
   with any ``<model>|model_response`` or ``<model>|total_cost`` column it is RouterBench
   wide CSV (``routerbench_csv``), else RouteLLM CSV (``routellm_csv``: one boolean column
   per model, optional ``<model>_response`` columns; the loader checks the booleans).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import orjson

from backends.data.types import DataFormatError

#: Bytes read to sniff a file's format.
SNIFF_BYTES = 256 * 1024

FORMATS = ("routellm_csv", "routerbench_csv", "routerdc_json", "mt_bench", "folder")


def detect(path: Path) -> str:
    """The format of ``path``: one of :data:`FORMATS`.

    Raises:
        DataFormatError: missing path, unreadable or empty file, or no known format.
    """
    if path.is_dir():
        if (path / "question.jsonl").is_file() and (path / "judgements.jsonl").is_file():
            return "mt_bench"
        return "folder"
    if not path.is_file():
        raise DataFormatError(path, "no such file or folder")
    head = _head(path)
    text = head.lstrip()
    if not text:
        raise DataFormatError(path, "the file is empty")
    if text[0] == "[":
        return _json_array(path, text)
    if text[0] == "{":
        raise DataFormatError(path, _jsonl_reason(text))
    return _csv(path, text)


def _head(path: Path) -> str:
    try:
        with path.open("rb") as fh:
            raw = fh.read(SNIFF_BYTES)
    except OSError as exc:
        raise DataFormatError(path, f"cannot read: {exc.strerror or exc}") from None
    if b"\0" in raw:
        raise DataFormatError(path, "binary file (NUL bytes), not CSV or JSON text")
    # A multi-byte character may be cut at the end of the sniffed bytes.
    try:
        return raw.decode("utf-8-sig", errors="ignore" if len(raw) == SNIFF_BYTES else "strict")
    except UnicodeDecodeError as exc:
        raise DataFormatError(path, f"not UTF-8 text: {exc.reason} at byte {exc.start}") from None


def _json_array(path: Path, text: str) -> str:
    # The sniffed text may end mid-element, so look for the keys rather than parse;
    # the RouterDC loader validates every element.
    if '"question"' in text and '"scores"' in text:
        return "routerdc_json"
    raise DataFormatError(path, "a JSON array without 'question' and 'scores' keys (RouterDC format expected)")


def _jsonl_reason(text: str) -> str:
    line = text.split("\n", 1)[0]
    try:
        keys = set(orjson.loads(line))
    except (orjson.JSONDecodeError, TypeError):
        return "starts with '{' but its first line is not a JSON object"
    if "eval_prompt" in keys:
        return ("a RouteLLM contaminated-prompt list, not outcome data (it is applied "
                "automatically to the data files in the same folder)")
    if {"question_id", "turns"} <= keys or {"question_id", "judge"} <= keys:
        return "one file of a RouteLLM MT-Bench folder: pass the folder holding question.jsonl and judgements.jsonl"
    return f"JSON lines with keys {sorted(keys)}: no known outcome-data format"


def _csv(path: Path, text: str) -> str:
    try:
        header = next(csv.reader(io.StringIO(text)))
    except (csv.Error, StopIteration) as exc:
        raise DataFormatError(path, f"not CSV text: {exc}") from None
    if "prompt" not in header:
        shown = ", ".join(repr(c) for c in header[:8])
        raise DataFormatError(path, f"no known format: not JSON, and no 'prompt' CSV column (first columns: {shown})")
    if any(c.endswith(("|model_response", "|total_cost")) for c in header):
        return "routerbench_csv"
    return "routellm_csv"
