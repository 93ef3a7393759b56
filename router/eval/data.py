"""Outcome data as arrays for evaluation: ``EvalData`` (scores and costs per row and model).

Loading (:func:`load_eval_data`) goes through :func:`backends.data.load` (format detected
from content, a folder is one dataset, RouteLLM contaminated prompts next to the data
dropped; a folder of dataset folders is one dataset too, see :func:`load_tree`), then:

- rows with a non-finite score or recorded cost (NaN, inf) are dropped and counted
  (``dropped["nan"]``), like rows with a missing score (``dropped["missing_score"]``) and
  rows with a blank cost cell of a model whose cost the data records in other rows
  (``dropped["missing_cost"]``: the cell is not filled in);
- prompts listed in ``--exclude`` files are dropped (``dropped["excluded"]``);
- a dataset with fewer than two models, or with no rows left, is an :class:`EvalDataError`
  naming the file and the problem (for an empty model column: which column).

Costs: the recorded USD per call where the data has it (RouterBench); otherwise the
per-call price of :func:`backends.replay.plan.per_call_prices` (RouteLLM paper prices for
GPT-4 / Mixtral, an assumed flat price for other models), the same for every row.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import orjson

from backends.data import DataFormatError, Dataset, OutcomeRow, load, normalise_prompt
from router.eval.errors import EvalDataError


@dataclass
class EvalData:
    """One dataset as arrays.

    Attributes:
        name: dataset name (file stem or folder name).
        path: the path it was loaded from.
        models: model names, column order of ``scores`` and ``costs``.
        prompts: ``(n,)`` prompt texts.
        scores: ``(n, m)`` recorded quality in [0, 1].
        costs: ``(n, m)`` USD per call.
        price_source: ``recorded`` or ``price_list``.
        dropped: reason -> rows dropped.
        response_tokens: ``(n, m)`` approximate completion tokens of each recorded response
            (characters / 4, :func:`router.classify.data.approx_tokens`), ``nan`` where the
            data holds no response; ``None`` when it holds none at all.
    """

    name: str
    path: str
    models: list[str]
    prompts: list[str]
    scores: np.ndarray
    costs: np.ndarray
    price_source: str
    dropped: dict[str, int] = field(default_factory=dict)
    response_tokens: np.ndarray | None = None

    @property
    def n(self) -> int:
        return len(self.prompts)

    @property
    def mean_scores(self) -> np.ndarray:
        """``(m,)`` mean recorded score per model."""
        return self.scores.mean(axis=0)

    @property
    def mean_costs(self) -> np.ndarray:
        """``(m,)`` mean USD per call per model."""
        return self.costs.mean(axis=0)

    @property
    def strong(self) -> int:
        """Index of the model with the highest mean score (first on ties)."""
        return int(np.argmax(self.mean_scores))

    @property
    def weak(self) -> int:
        """Two-model data: the other model. Otherwise the cheapest model."""
        if len(self.models) == 2:
            return 1 - self.strong
        return int(np.argmin(self.mean_costs))

    @property
    def two_model(self) -> bool:
        return len(self.models) == 2

    def subset(self, idx: np.ndarray) -> "EvalData":
        """The rows ``idx`` (indices into this dataset) as a new dataset."""
        idx = np.asarray(idx, dtype=int)
        tokens = None if self.response_tokens is None else self.response_tokens[idx]
        return EvalData(self.name, self.path, list(self.models), [self.prompts[i] for i in idx],
                        self.scores[idx], self.costs[idx], self.price_source, dict(self.dropped), tokens)

    def restrict_models(self, models: list[str]) -> "EvalData":
        """The same rows with only ``models`` (in that order); every one must be present."""
        cols = [self.models.index(m) for m in models]
        tokens = None if self.response_tokens is None else self.response_tokens[:, cols]
        return EvalData(self.name, self.path, list(models), list(self.prompts), self.scores[:, cols],
                        self.costs[:, cols], self.price_source, dict(self.dropped), tokens)


def read_exclude(path: Path) -> set[str]:
    """Normalised prompts to drop, from a JSON-lines file of ``{"eval_prompt": ...}`` (RouteLLM's
    ``contaminated_prompts.jsonl``) or ``{"prompt": ...}`` objects.

    Raises:
        EvalDataError: unreadable file, or a line that is not such an object.
    """
    out: set[str] = set()
    try:
        lines = path.read_bytes().splitlines()
    except OSError as exc:
        raise EvalDataError(path, f"cannot read exclude file: {exc.strerror or exc}") from None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
            text = obj.get("eval_prompt", obj.get("prompt"))
        except (orjson.JSONDecodeError, AttributeError):
            text = None
        if not isinstance(text, str):
            raise EvalDataError(path, f"line {n}: not a JSON object with a string 'eval_prompt' or 'prompt'")
        out.add(normalise_prompt(text))
    return out


def load_eval_data(path: str | Path, exclude: set[str] | None = None,
                   prices_per_1m: dict[str, float] | None = None) -> EvalData:
    """Load ``path`` (file or folder) for evaluation (see the module docstring).

    Args:
        prices_per_1m: model -> USD per 1M tokens replacing the price list's figure for
            models whose calls record no cost (``--prices``); recorded costs are kept.

    Raises:
        EvalDataError: unknown format, malformed content, fewer than two models, a model
            column without scores, or no rows left.
    """
    from backends.replay.plan import per_call_prices

    path = Path(path)
    try:
        ds = load_tree(path)
    except DataFormatError as exc:
        if path.is_file() and _is_log_export(path):
            raise EvalDataError(path, LOG_EXPORT_REASON) from None
        raise EvalDataError(exc.path, exc.reason) from None
    if len(ds.models) < 2:
        found = ", ".join(repr(m) for m in ds.models) or "none"
        raise EvalDataError(path, f"single-model dataset (models: {found}); routing needs at least two models")
    dropped = dict(ds.dropped)
    rows = _costed_rows(_finite_rows(ds.rows, ds.models, dropped), ds.models, dropped)
    if exclude:
        kept = [r for r in rows if normalise_prompt(r.prompt) not in exclude]
        if len(kept) < len(rows):
            dropped["excluded"] = len(rows) - len(kept)
        rows = kept
    if not rows:
        raise EvalDataError(path, _why_empty(path, ds, dropped))
    clean = Dataset(ds.name, ds.format, ds.models, rows, dropped)
    scores = np.array([[r.scores[m] for m in ds.models] for r in rows], dtype=float)
    prices, source = per_call_prices(clean)
    if prices_per_1m and source == "price_list":
        prices = {m: _reprice(m, p, prices_per_1m) for m, p in prices.items()}
        if any(m in prices_per_1m for m in ds.models):
            source = "price_list+--prices"
    costs = np.array([[_cost(r, m, prices) for m in ds.models] for r in rows], dtype=float)
    return EvalData(ds.name, str(path), list(ds.models), [r.prompt for r in rows], scores, costs, source,
                    {k: v for k, v in dropped.items() if v}, _response_tokens(rows, ds.models))


_NO_FILES = "no outcome data files in the folder"
LOG_EXPORT_REASON = ("a mixroute log export (`mixroute logs export`): it holds the outcome of one model per request, "
                     "not of every model, so routers cannot be compared on it; try a policy edit on it with "
                     "`mixroute policy what-if NEW_POLICY --logs FILE`")


def _is_log_export(path: Path) -> bool:
    """Whether ``path`` looks like ``mixroute logs export`` output (JSON lines or CSV)."""
    try:
        with path.open("rb") as fh:
            first = fh.readline(1 << 20).decode("utf-8", "replace")
    except OSError:
        return False
    return all(k in first for k in ("request_id", "candidates", "chosen"))


def load_tree(path: Path) -> Dataset:
    """:func:`backends.data.load`, and for a folder with no data files of its own, the rows of
    its sub-folders as ONE dataset named after the folder (``routellm/`` = MMLU + GSM8K as
    mixed traffic). Sub-folders without data (e.g. only a contaminated-prompt list) are
    skipped; the others must share one model set.

    Raises:
        DataFormatError: as :func:`backends.data.load`; sub-folders with different model sets.
    """
    try:
        return load(path)
    except DataFormatError as exc:
        if not (path.is_dir() and exc.reason == _NO_FILES):
            raise
    parts = []
    for sub in sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith(".")):
        try:
            parts.append(load_tree(sub))
        except DataFormatError as exc:
            if not exc.reason.startswith(_NO_FILES):
                raise
    if not parts:
        raise DataFormatError(path, _NO_FILES + " or its sub-folders")
    first = parts[0]
    for part in parts[1:]:
        if set(part.models) != set(first.models):
            raise DataFormatError(path, f"sub-folder datasets {first.name!r} and {part.name!r} have different "
                                        f"models ({sorted(first.models)} vs {sorted(part.models)}); a folder is "
                                        "one dataset with one model set: pass each sub-folder as its own path (--test "
                                        "for eval, --data for calibrate)")
    dropped = summed_dropped(parts)
    fmt = first.format if all(p.format == first.format for p in parts) else "mixed"
    return Dataset(path.name, fmt, list(first.models), [r for p in parts for r in p.rows], dropped)


def data_files(path: Path) -> set[Path]:
    """The files :func:`load_tree` reads for ``path``, resolved: the file itself; a folder's
    data files (:func:`backends.data.loader.is_data_file`), or, with none, its sub-folders'.
    Empty where there is nothing to read (loading then says why)."""
    from backends.data.loader import is_data_file

    path = Path(path)
    if not path.is_dir():
        return {path.resolve()} if path.is_file() else set()
    files = {p.resolve() for p in path.iterdir() if is_data_file(p)}
    if files:
        return files
    subs = sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))
    return set().union(*(data_files(sub) for sub in subs))


def summed_dropped(parts) -> dict[str, int]:
    """The ``dropped`` counts of ``parts`` (datasets: anything with a ``dropped`` mapping of
    reason -> rows) added up per reason, in first-seen order."""
    out: dict[str, int] = {}
    for part in parts:
        for k, v in part.dropped.items():
            out[k] = out.get(k, 0) + v
    return out


def dropped_text(dropped: dict[str, int]) -> str:
    """``"3 nan, 1 missing_score"``: rows dropped per reason, as the eval report words them
    (``""`` for an empty mapping)."""
    return ", ".join(f"{v} {k}" for k, v in dropped.items())


def _reprice(model: str, per_call: float, per_1m: dict[str, float]) -> float:
    """The per-call price at ``per_1m[model]`` USD per 1M tokens instead of the price list's
    (same tokens per call: ``per_call`` is the list price times tokens / 1e6)."""
    from backends.replay.plan import DEFAULT_PRICE_PER_1M_TOKENS, PRICE_PER_1M_TOKENS

    if model not in per_1m:
        return per_call
    listed = PRICE_PER_1M_TOKENS.get(model, DEFAULT_PRICE_PER_1M_TOKENS)
    return per_call / listed * per_1m[model]


def _finite_rows(rows: list[OutcomeRow], models: list[str], dropped: dict[str, int]) -> list[OutcomeRow]:
    out = []
    for r in rows:
        values = [r.scores[m] for m in models] + [c for m in models if (c := r.costs.get(m)) is not None]
        if all(math.isfinite(v) for v in values):
            out.append(r)
    if len(out) < len(rows):
        dropped["nan"] = dropped.get("nan", 0) + len(rows) - len(out)
    return out


def _costed_rows(rows: list[OutcomeRow], models: list[str], dropped: dict[str, int]) -> list[OutcomeRow]:
    """``rows`` less those with no cost for a model whose cost other rows record (a blank
    cost cell), counted in ``dropped["missing_cost"]``. A model with no recorded cost at all
    is priced from the price list (:func:`backends.replay.plan.per_call_prices`)."""
    costed = [m for m in models if any(r.costs.get(m) is not None for r in rows)]
    out = [r for r in rows if all(r.costs.get(m) is not None for m in costed)]
    if len(out) < len(rows):
        dropped["missing_cost"] = dropped.get("missing_cost", 0) + len(rows) - len(out)
    return out


def _response_tokens(rows: list[OutcomeRow], models: list[str]) -> np.ndarray | None:
    from router.classify.data import approx_tokens

    out = np.array([[approx_tokens(t) if (t := r.responses.get(m)) else math.nan for m in models] for r in rows],
                   dtype=float)
    return out if np.isfinite(out).any() else None


def _cost(row: OutcomeRow, model: str, prices: dict[str, float]) -> float:
    c = row.costs.get(model)
    return prices[model] if c is None else float(c)


def _why_empty(path: Path, ds: Dataset, dropped: dict[str, int]) -> str:
    counts = ", ".join(f"{v} {k}" for k, v in dropped.items() if v) or "the data has no rows"
    empty = _empty_columns(path, ds.models) if dropped.get("missing_score") else []
    if empty:
        cols = ", ".join(repr(c) for c in empty)
        return f"model column {cols} has no scores, so every row was dropped ({counts})"
    return f"no rows left to evaluate ({counts})"


def _empty_columns(path: Path, models: list[str]) -> list[str]:
    """Model columns of a CSV (or of every CSV in a folder) that hold no value at all."""
    files = sorted(path.glob("*.csv")) if path.is_dir() else [path]
    seen: dict[str, bool] = {m: False for m in models}
    for f in files:
        try:
            with f.open(newline="", encoding="utf-8-sig") as fh:
                for rec in csv.DictReader(fh):
                    for m in models:
                        if (rec.get(m) or "").strip():
                            seen[m] = True
        except (OSError, UnicodeDecodeError, csv.Error):
            return []
    return [m for m, s in seen.items() if not s]
