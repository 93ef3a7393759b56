"""The common row type every outcome-data format is loaded into.

Invariant kept by every loader: each row of a :class:`Dataset` has a score for every
model in :attr:`Dataset.models` (rows with a missing score are dropped and counted in
:attr:`Dataset.dropped`), so per-model means are taken over the same rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class DataFormatError(Exception):
    """An outcome-data file or folder is unreadable or of no known format.

    Args:
        path: the file or folder at fault.
        reason: what is wrong, e.g. ``"no 'prompt' column"``.
    """

    def __init__(self, path: str | Path, reason: str):
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


def normalise_prompt(text: str) -> str:
    """Prompt text with every run of whitespace collapsed to one space, stripped.

    This is the key prompts are matched on (contaminated-prompt filtering, replay lookup),
    so that a client re-joining or re-wrapping the text still hits the recorded row.
    """
    return " ".join(text.split())


@dataclass
class OutcomeRow:
    """One prompt and how each model did on it.

    Attributes:
        prompt: the prompt text sent to the models (RouterBench list prompts joined by
            newlines; MT-Bench: the turn-1 user message).
        scores: model -> recorded quality in [0, 1] (1.0 = correct; RouterDC soft
            targets; MT-Bench judge score / 10).
        responses: model -> recorded answer text, ``None`` when the source has none.
        costs: model -> recorded USD cost of that call, ``None`` when not recorded.
        source: the file stem the row came from (e.g. ``mmlu_anatomy``).
        meta: format-specific extras (``sample_id``, ``eval_name``, ``question_id``...).
    """

    prompt: str
    scores: dict[str, float]
    responses: dict[str, str | None] = field(default_factory=dict)
    costs: dict[str, float | None] = field(default_factory=dict)
    source: str = ""
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class Dataset:
    """One outcome dataset: a file (named after its stem) or a folder (named after it).

    Attributes:
        name: dataset name.
        format: detected format (``routellm_csv``, ``routerbench_csv``, ``routerdc_json``,
            ``mt_bench``; ``mixed`` never occurs: a folder holds one model set).
        models: model names, in column order of the first file.
        rows: the rows, in file order.
        dropped: reason -> number of rows dropped (``contaminated``, ``missing_score``).
    """

    name: str
    format: str
    models: list[str]
    rows: list[OutcomeRow]
    dropped: dict[str, int] = field(default_factory=dict)

    def mean_score(self, model: str, rows: list[OutcomeRow] | None = None) -> float:
        """Mean recorded score of ``model`` over ``rows`` (default: all rows); 0.0 if none."""
        rows = self.rows if rows is None else rows
        return sum(r.scores[model] for r in rows) / len(rows) if rows else 0.0

    def mean_cost(self, model: str) -> float | None:
        """Mean recorded USD cost per call of ``model``, ``None`` when no cost is recorded."""
        costs = [c for r in self.rows if (c := r.costs.get(model)) is not None]
        return sum(costs) / len(costs) if costs else None

    @property
    def has_costs(self) -> bool:
        """Whether every model has at least one recorded cost."""
        return all(self.mean_cost(m) is not None for m in self.models)

    def strongest(self) -> str:
        """The model with the highest mean score (first in :attr:`models` on ties)."""
        return max(self.models, key=lambda m: (self.mean_score(m), -self.models.index(m)))
