"""RouteLLM's MT-Bench layout: a folder with ``question.jsonl`` and ``judgements.jsonl``.

``question.jsonl``: ``question_id``, ``category``, ``turns`` (two user turns).
``judgements.jsonl``: one row per (question, model, turn) with ``score`` (GPT-4
single-answer grade, 1-10; FastChat writes -1 when the judgement could not be parsed,
and those rows are ignored) and ``turn`` (1 or 2). As RouteLLM does, a question is
routed on its turn-1 prompt and scored as the mean of its turns' grades, scaled to
[0, 1] by dividing by 10. No answer text or cost is loaded.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import orjson

from backends.data.routellm import contaminated_prompts
from backends.data.types import DataFormatError, Dataset, OutcomeRow, normalise_prompt


def _jsonl(path: Path) -> list[dict]:
    out = []
    for n, line in enumerate(path.read_bytes().splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise DataFormatError(path, f"line {n}: invalid JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise DataFormatError(path, f"line {n}: not a JSON object")
        obj["_line"] = n
        out.append(obj)
    return out


def _grades(path: Path) -> tuple[list[str], dict]:
    """Model order, and (question_id, model) -> {turn: [grades]} from judgements.jsonl."""
    grades: dict = defaultdict(lambda: defaultdict(list))
    models: list[str] = []
    for j in _jsonl(path):
        try:
            qid, model, turn, score = j["question_id"], j["model"], int(j.get("turn", 1)), float(j["score"])
        except (KeyError, TypeError, ValueError):
            raise DataFormatError(path, f"line {j['_line']}: needs question_id, model and a numeric score") from None
        if model not in models:
            models.append(model)
        if score >= 0:
            grades[(qid, model)][turn].append(score)
    return models, grades


def load_mt_bench(folder: Path) -> Dataset:
    """Load an MT-Bench folder as a dataset named after the folder.

    Questions without a valid grade for every model are dropped
    (``dropped["missing_score"]``), and contaminated turn-1 prompts (``dropped["contaminated"]``).

    Raises:
        DataFormatError: a line is not JSON, or lacks its required keys.
    """
    models, grades = _grades(folder / "judgements.jsonl")
    contaminated = contaminated_prompts(folder)
    rows: list[OutcomeRow] = []
    dropped = {"contaminated": 0, "missing_score": 0}
    qpath = folder / "question.jsonl"
    for q in _jsonl(qpath):
        turns = q.get("turns")
        if "question_id" not in q or not isinstance(turns, list) or not turns or not isinstance(turns[0], str):
            raise DataFormatError(qpath, f"line {q['_line']}: needs question_id and a list of string turns")
        if normalise_prompt(turns[0]) in contaminated:
            dropped["contaminated"] += 1
            continue
        scores = {}
        for m in models:
            per_turn = grades.get((q["question_id"], m), {})
            means = [sum(g) / len(g) for g in per_turn.values() if g]
            if means:
                scores[m] = sum(means) / len(means) / 10.0
        if len(scores) < len(models):
            dropped["missing_score"] += 1
            continue
        rows.append(OutcomeRow(prompt=turns[0], scores=scores, responses={m: None for m in models},
                               costs={m: None for m in models}, source=folder.name,
                               meta={"question_id": q["question_id"], "category": q.get("category"),
                                     "turns": turns}))
    return Dataset(name=folder.name, format="mt_bench", models=models, rows=rows,
                   dropped={k: v for k, v in dropped.items() if v})
