"""RouterBench wide CSVs (Martian's RouterBench 0-shot rows as redistributed by RouterDC).

Columns: an unnamed pandas index, ``sample_id``, ``prompt`` (a Python-literal list of
strings), ``eval_name``, one score column per model (0/1; MBPP may be partial),
``<model>|model_response`` (a Python-literal list of strings), ``<model>|total_cost``
(USD for that call) and ``oracle_model_to_route_to``. Rows with any empty score are
dropped, as RouterBench's own evaluation does (20 ``arc_challenge`` train rows).
"""

from __future__ import annotations

import ast
import csv
from pathlib import Path

from backends.data.routellm import FIELD_LIMIT
from backends.data.types import DataFormatError, Dataset, OutcomeRow

#: Non-model columns copied into ``OutcomeRow.meta``.
META_COLUMNS = ("sample_id", "eval_name", "oracle_model_to_route_to")
_SKIP = {"", "Unnamed: 0", "prompt", *META_COLUMNS}


def literal_text(value: str) -> str:
    """The text of a Python-literal list of strings (items joined by newlines).

    Anything that is not such a literal is returned as it is: the cell already is text.
    """
    v = value.strip()
    if not v.startswith("["):
        return value
    try:
        items = ast.literal_eval(v)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return value
    if isinstance(items, list) and all(isinstance(i, str) for i in items):
        return "\n".join(items)
    return value


def _float(value: str, path: Path, line: int, column: str) -> float | None:
    if not value.strip():
        return None
    try:
        return float(value)
    except ValueError:
        raise DataFormatError(path, f"line {line}: column {column!r} holds {value[:40]!r}, not a number") from None


def load_routerbench_csv(path: Path) -> Dataset:
    """Load one RouterBench wide CSV as a dataset named after the file stem.

    Raises:
        DataFormatError: no score columns, ragged rows, or a non-numeric score or cost.
    """
    csv.field_size_limit(FIELD_LIMIT)
    rows: list[OutcomeRow] = []
    missing = 0
    with path.open(newline="", encoding="utf-8-sig") as fh:
        reader = csv.reader(fh)
        header = next(reader)
        col = {c: i for i, c in enumerate(header)}
        models = [c for c in header if "|" not in c and c not in _SKIP]
        if not models:
            raise DataFormatError(path, "RouterBench CSV without score columns")
        for rec in reader:
            if len(rec) != len(header):
                raise DataFormatError(path, f"line {reader.line_num}: {len(rec)} fields, header has {len(header)}")
            line = reader.line_num
            scores = {m: _float(rec[col[m]], path, line, m) for m in models}
            if any(s is None for s in scores.values()):
                missing += 1
                continue
            responses = {m: _response(rec, col, m) for m in models}
            costs = {m: _float(rec[col[c]], path, line, c) if (c := f"{m}|total_cost") in col else None for m in models}
            meta = {k: rec[col[k]] for k in META_COLUMNS if k in col}
            rows.append(OutcomeRow(prompt=literal_text(rec[col["prompt"]]), scores=scores, responses=responses,
                                   costs=costs, source=path.stem, meta=meta))
    return Dataset(name=path.stem, format="routerbench_csv", models=models, rows=rows,
                   dropped={"missing_score": missing} if missing else {})


def _response(rec: list[str], col: dict[str, int], model: str) -> str | None:
    i = col.get(f"{model}|model_response")
    if i is None or not rec[i]:
        return None
    return literal_text(rec[i])
