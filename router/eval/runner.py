"""``evaluate``: load the test (and train) data, run every router, summarise.

For each ``--test`` path (one dataset; a folder is one dataset of all its files):

1. load it (:func:`router.eval.data.load_eval_data`), dropping ``--exclude`` prompts;
   with ``holdout``, keep only the rows in the classifier's held-out ``test`` split
   (:func:`router.classify.data.split_of`), so that the shipped heads are scored on
   prompts they were not trained on and every router on the same rows;
2. the train rows for learned routers: every ``--train`` dataset whose models include
   the test's, restricted to them, minus prompts that also occur in the test rows
   (counted in the note); none given or none matching: the routers cross-fit (see
   :mod:`router.eval.routers.base`);
3. run each router and summarise it (:mod:`router.eval.summary`). A router that cannot
   run here (:class:`~router.eval.errors.RouterUnavailable`) gets a row of ``None``
   with the reason, and the others still run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from backends.data import normalise_prompt
from router.eval import routers as registry
from router.eval.data import EvalData, load_eval_data
from router.eval.errors import EvalDataError, RouterUnavailable
from router.eval.prices import unused_prices
from router.eval.routers.base import Context
from router.eval.summary import BOOTSTRAP, Result, skipped, summarise

Progress = Callable[[str, int, int], None]


@dataclass
class EvalConfig:
    """Settings of one evaluation.

    Attributes:
        routers: router names (default: all registered); a repeated name runs once.
        exclude: normalised prompts to drop from every dataset.
        embed: texts -> embeddings for learned routers (``None``: the cached MiniLM).
        bootstrap: resamples for confidence intervals (0: none).
        seed: seed of random routers, folds, initialisation and resampling.
        holdout: keep only the classifier's held-out split (see the module docstring).
        options: passed to routers (``adapters``, ``predictor``).
        prices_per_1m: ``--prices``: model -> USD per 1M tokens for data without recorded costs.
        warn: called with one line per ``--prices`` entry that prices nothing
            (:func:`router.eval.prices.unused_prices`), once the data is loaded.
    """

    routers: list[str] = field(default_factory=list)
    exclude: set[str] = field(default_factory=set)
    embed: Callable[..., np.ndarray] | None = None
    bootstrap: int = BOOTSTRAP
    seed: int = 0
    holdout: bool = False
    options: dict[str, Any] = field(default_factory=dict)
    prices_per_1m: dict[str, float] = field(default_factory=dict)
    warn: Callable[[str], None] | None = None


@dataclass
class DatasetReport:
    """The results of one dataset, and what was loaded."""

    data: EvalData
    results: list[Result]
    train_note: str = ""


def holdout_rows(data: EvalData) -> EvalData:
    """The rows whose prompt is in the classifier's held-out ``test`` split."""
    from router.classify.data import split_of

    keep = np.array([i for i, p in enumerate(data.prompts) if split_of(p) == "test"], dtype=int)
    if len(keep) == 0:
        raise EvalDataError(data.path, "no row is in the classifier's held-out split (--holdout)")
    out = data.subset(keep)
    out.dropped["not_holdout"] = data.n - len(keep)
    return out


def train_for(test: EvalData, train: list[EvalData]) -> tuple[EvalData | None, str]:
    """Train rows matching ``test``'s models, minus prompts that occur in ``test``; and a note."""
    usable = [t.restrict_models(test.models) for t in train if set(test.models) <= set(t.models)]
    if not usable:
        if train:
            return None, f"no --train data has all of {test.models}: learned routers cross-fit"
        return None, ""
    seen = {normalise_prompt(p) for p in test.prompts}
    prompts, scores, costs, tokens, overlap = [], [], [], [], 0
    for t in usable:
        no_tokens = np.full(len(test.models), np.nan)
        for i, p in enumerate(t.prompts):
            if normalise_prompt(p) in seen:
                overlap += 1
                continue
            prompts.append(p)
            scores.append(t.scores[i])
            costs.append(t.costs[i])
            tokens.append(no_tokens if t.response_tokens is None else t.response_tokens[i])
    if not prompts:
        return None, "every --train prompt is also a test prompt: learned routers cross-fit"
    response_tokens = np.array(tokens) if np.isfinite(tokens).any() else None
    merged = EvalData("+".join(t.name for t in usable), ",".join(t.path for t in usable), list(test.models),
                      prompts, np.array(scores), np.array(costs), usable[0].price_source, {}, response_tokens)
    note = f"train {merged.n} rows from {merged.name}"
    return merged, note + (f" ({overlap} rows shared with the test rows dropped)" if overlap else "")


def default_embed(progress: Progress | None = None) -> Callable[..., np.ndarray]:
    """The cached MiniLM embedder as a ``texts -> array`` function with progress."""
    from router.eval.embed import make_embedder

    embedder = make_embedder("minilm")
    return lambda texts: embedder(texts, (lambda d, t: progress("embed", d, t)) if progress else None)


def evaluate(tests: list[Path], train: list[Path] | None = None, config: EvalConfig | None = None,
             progress: Progress | None = None) -> list[DatasetReport]:
    """Evaluate ``config.routers`` on every test path.

    Raises:
        EvalDataError: a test, train or exclude path is unusable (raised before any router runs).
        KeyError: an unknown router name.
    """
    config = config or EvalConfig()
    names = list(dict.fromkeys(config.routers or registry.names()))
    routers = [registry.get(n) for n in names]
    datasets = [load_eval_data(p, config.exclude, config.prices_per_1m) for p in tests]
    if config.holdout:
        datasets = [holdout_rows(d) for d in datasets]
    trains = [load_eval_data(p, config.exclude, config.prices_per_1m) for p in train or []]
    if config.warn is not None:
        for line in unused_prices(config.prices_per_1m, [*datasets, *trains]):
            config.warn(line)
    embed = config.embed
    if embed is None and any(r.learned and r.name != "mixroute" for r in routers):
        embed = default_embed(progress)
    mix = next((r for r in routers if r.name == "mixroute"), None)
    if mix is not None and config.embed is None and not trains and hasattr(mix, "prefill"):
        # One encoder pass for both: the shipped heads' pass fills the embedding cache.
        try:
            mix.prefill(list(dict.fromkeys(p for d in datasets for p in d.prompts)),
                        Context(train=None, embed=embed, seed=config.seed, progress=progress, options=config.options))
        except RouterUnavailable:
            pass  # reported in mixroute's row when it runs
    reports = []
    for data in datasets:
        fit_rows, note = train_for(data, trains)
        ctx = Context(train=fit_rows, embed=embed, seed=config.seed, progress=progress, options=config.options)
        results = []
        for i, r in enumerate(routers):
            if progress:
                progress(f"{data.name}: {r.name}", i, len(routers))
            try:
                run = r.run(data, ctx)
            except RouterUnavailable as exc:
                results.append(skipped(data, r.name, str(exc)))
                continue
            results.append(summarise(data, run, bootstrap=config.bootstrap, seed=config.seed))
        if progress:
            progress(f"{data.name}: done", len(routers), len(routers))
        reports.append(DatasetReport(data, results, note))
    return reports
