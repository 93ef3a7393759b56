"""RouteLLM outcome CSVs (lm-sys/RouteLLM ``mmlu/*.csv``, ``gsm8k/gsm8k_responses.csv``).

Columns: ``prompt``, one boolean column per model (``True`` = answered correctly), and
optionally ``<model>_response`` with the answer text (GSM8K). No cost is recorded.
RouteLLM drops prompts listed in ``contaminated_prompts.jsonl`` (``eval_prompt`` key)
from its evaluation; :func:`contaminated_prompts` reads that list from the data's folder
and the loaders here drop those rows too (matched on :func:`normalise_prompt` text).
"""

from __future__ import annotations

import csv
from pathlib import Path

import orjson

from backends.data.types import DataFormatError, Dataset, OutcomeRow, normalise_prompt

CONTAMINATED_FILE = "contaminated_prompts.jsonl"
#: Largest CSV field accepted (characters); prompts and responses can be long.
FIELD_LIMIT = 2**31 - 1

_TRUE = {"true", "1", "1.0", "yes"}
_FALSE = {"false", "0", "0.0", "no"}
#: Columns that are neither models nor the prompt (pandas index columns).
_INDEX_COLUMNS = {"", "Unnamed: 0"}


def contaminated_prompts(folder: Path) -> set[str]:
    """Normalised ``eval_prompt`` texts of ``folder/contaminated_prompts.jsonl`` (empty if absent).

    Raises:
        DataFormatError: the file exists but a line is not a JSON object with ``eval_prompt``.
    """
    path = folder / CONTAMINATED_FILE
    if not path.is_file():
        return set()
    out: set[str] = set()
    for n, line in enumerate(path.read_bytes().splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.add(normalise_prompt(orjson.loads(line)["eval_prompt"]))
        except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
            raise DataFormatError(path, f"line {n}: not a JSON object with a string 'eval_prompt'") from None
    return out


def _bool(value: str, path: Path, line: int, column: str) -> float | None:
    v = value.strip().lower()
    if v in _TRUE:
        return 1.0
    if v in _FALSE:
        return 0.0
    if not v:
        return None
    raise DataFormatError(path, f"line {line}: column {column!r} holds {value[:40]!r}, not a boolean "
                                "(RouteLLM CSV expected)")


def load_routellm_csv(path: Path) -> Dataset:
    """Load one RouteLLM CSV as a dataset named after the file stem.

    Rows with an empty model column are dropped (``dropped["missing_score"]``), and
    contaminated prompts (``dropped["contaminated"]``).

    Raises:
        DataFormatError: no model columns, or a model column holds a non-boolean.
    """
    csv.field_size_limit(FIELD_LIMIT)
    contaminated = contaminated_prompts(path.parent)
    dropped = {"contaminated": 0, "missing_score": 0}
    rows: list[OutcomeRow] = []
    with path.open(newline="", encoding="utf-8-sig") as fh:
        reader = csv.reader(fh)
        header = next(reader)
        col = {c: i for i, c in enumerate(header)}
        models = [c for c in header if c != "prompt" and c not in _INDEX_COLUMNS and not c.endswith("_response")]
        if not models:
            raise DataFormatError(path, "a 'prompt' column but no model columns")
        for rec in reader:
            if len(rec) != len(header):
                raise DataFormatError(path, f"line {reader.line_num}: {len(rec)} fields, header has {len(header)}")
            prompt = rec[col["prompt"]]
            if normalise_prompt(prompt) in contaminated:
                dropped["contaminated"] += 1
                continue
            scores = {m: _bool(rec[col[m]], path, reader.line_num, m) for m in models}
            if any(s is None for s in scores.values()):
                dropped["missing_score"] += 1
                continue
            responses = {m: (rec[col[f"{m}_response"]] if f"{m}_response" in col else None) for m in models}
            rows.append(OutcomeRow(prompt=prompt, scores=scores, responses=responses,
                                   costs={m: None for m in models}, source=path.stem))
    return Dataset(name=path.stem, format="routellm_csv", models=models, rows=rows,
                   dropped={k: v for k, v in dropped.items() if v})
