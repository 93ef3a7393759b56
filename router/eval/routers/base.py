"""What every evaluated router is, and the shared machinery of score-based routers.

A router turns a test dataset into a :class:`RouterRun`: model choices per operating
point, one row per threshold of its sweep. :class:`ScoreRouter` routers only predict an
``(n, m)`` quality matrix; the sweep (:mod:`router.eval.sweep`) makes the points.

Learned routers (:class:`LearnedRouter`) are fit on ``--train`` rows when given; without
them they are cross-fitted on the test rows: the rows are cut into :data:`FOLDS` folds by
a hash of the normalised prompt (a prompt and its duplicates share a fold) and each fold
is predicted by a model fit on the other folds, so no row is predicted by a model that saw it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from backends.data import normalise_prompt
from router.eval.data import EvalData
from router.eval.sweep import NUM_RESULTS, lambda_grid, quantile_sweep, willingness_sweep

#: Folds of the internal cross-fitting when no ``--train`` rows are given.
FOLDS = 5

Progress = Callable[[str, int, int], None]


@dataclass
class Context:
    """What a router may use besides the test rows.

    Attributes:
        train: rows to fit on (``--train``), restricted to the test's models; ``None``: cross-fit.
        embed: texts -> ``(n, d)`` embeddings (cached).
        seed: seed of every random choice.
        num_results: RouteLLM bins for two-model sweeps.
        progress: ``(label, done, total)`` callback.
        options: router-specific settings (e.g. ``adapters`` for ``mixroute``).
    """

    train: EvalData | None = None
    embed: Callable[..., np.ndarray] | None = None
    seed: int = 0
    num_results: int = NUM_RESULTS
    progress: Progress | None = None
    options: dict[str, Any] = field(default_factory=dict)

    def tick(self, label: str, done: int, total: int) -> None:
        if self.progress:
            self.progress(label, done, total)


@dataclass
class RouterRun:
    """A router's operating points on one dataset.

    Attributes:
        router: router name.
        choices: ``(K, n)`` model index per operating point and row.
        thresholds: ``(K,)`` the knob at each point (router-specific units, see ``knob``).
        knob: what ``thresholds`` are (``strong score``, ``lambda (quality per USD)``, ``target``...).
        fit: how it was fit (``train``, ``cross-fit 5 folds``, ``shipped heads``, ``none``).
        extra: router-specific details (e.g. bar compliance), JSON-ready.
    """

    router: str
    choices: np.ndarray
    thresholds: np.ndarray
    knob: str
    fit: str = "none"
    extra: dict[str, Any] = field(default_factory=dict)


class EvalRouter:
    """Base class: subclasses set ``name`` and implement :meth:`run`."""

    name: ClassVar[str] = ""
    learned: ClassVar[bool] = False
    description: ClassVar[str] = ""

    def run(self, test: EvalData, ctx: Context) -> RouterRun:
        raise NotImplementedError


class ScoreRouter(EvalRouter):
    """A router that predicts per-model quality; two-model data is swept as RouteLLM
    does (quantile thresholds on ``P[strong] - P[weak]``), other data by willingness to pay."""

    #: ``quantile`` (RouteLLM) or ``lambda`` on two-model data.
    two_model_sweep: ClassVar[str] = "quantile"

    def predict(self, test: EvalData, ctx: Context) -> tuple[np.ndarray, str]:
        """``((n, m) predicted quality, how it was fit)``."""
        raise NotImplementedError

    def run(self, test: EvalData, ctx: Context) -> RouterRun:
        pred, fit = self.predict(test, ctx)
        if test.two_model and self.two_model_sweep == "quantile":
            s = pred[:, test.strong] - pred[:, test.weak]
            th, ch = quantile_sweep(s, test.strong, test.weak, ctx.num_results)
            return RouterRun(self.name, ch, th, "strong score threshold", fit)
        lams = lambda_grid(test.mean_scores, test.mean_costs)
        th, ch = willingness_sweep(pred, test.costs, lams)
        return RouterRun(self.name, ch, th, "lambda (quality per USD)", fit)


def fold_of(prompts: list[str], folds: int = FOLDS) -> np.ndarray:
    """``(n,)`` fold index per prompt, from SHA-1 of the normalised prompt."""
    return np.array([int(hashlib.sha1(normalise_prompt(p).encode("utf-8", "replace")).hexdigest()[:8], 16) % folds
                     for p in prompts])


@contextlib.contextmanager
def one_blas_thread() -> Iterator[None]:
    """Limit BLAS to one thread while fitting (when ``threadpoolctl`` is installed).

    The matrices here are small, so multi-threaded OpenBLAS spends more time handing work
    between threads than computing; on a shared machine it fights the other processes too.
    """
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        yield
        return
    with threadpool_limits(limits=1, user_api="blas"):
        yield


class LearnedRouter(ScoreRouter):
    """A :class:`ScoreRouter` fit on embeddings: subclasses implement :meth:`fit_predict`."""

    learned = True

    def fit_predict(self, x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, seed: int) -> np.ndarray:
        """Fit on ``x_train (n, d)``, ``y_train (n, m)`` scores; return ``(n_test, m)`` predicted quality."""
        raise NotImplementedError

    def predict(self, test: EvalData, ctx: Context) -> tuple[np.ndarray, str]:
        with one_blas_thread():
            return self._predict(test, ctx)

    def _predict(self, test: EvalData, ctx: Context) -> tuple[np.ndarray, str]:
        if ctx.embed is None:
            raise ValueError("learned routers need Context.embed")
        x_test = ctx.embed(test.prompts)
        if ctx.train is not None:
            x_train = ctx.embed(ctx.train.prompts)
            return self.fit_predict(x_train, ctx.train.scores, x_test, ctx.seed), f"train ({ctx.train.n} rows)"
        folds = fold_of(test.prompts)
        pred = np.zeros_like(test.scores, dtype=float)
        done = []

        def fit_fold(f: int) -> None:
            held = folds == f
            if not held.any():
                return
            fit_rows = ~held
            if not fit_rows.any():  # a tiny dataset in one fold: predict the mean
                pred[held] = test.scores.mean(axis=0)
                return
            pred[held] = self.fit_predict(x_test[fit_rows], test.scores[fit_rows], x_test[held], ctx.seed + f)
            done.append(f)
            ctx.tick(self.name, len(done), FOLDS)

        # Folds are independent and each is seeded by its index, so fitting them on parallel
        # threads (numpy and BLAS release the GIL; one BLAS thread each) gives the same result.
        with ThreadPoolExecutor(max_workers=max(1, min(FOLDS, os.cpu_count() or 1))) as pool:
            list(pool.map(fit_fold, range(FOLDS)))
        return pred, f"cross-fit {FOLDS} folds"
