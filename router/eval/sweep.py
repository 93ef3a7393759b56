"""Turning per-prompt router scores into operating points (choices per threshold).

Two sweeps, both returning ``(thresholds, choices)`` with ``choices`` an ``(K, n)`` array
of model indices (one row per operating point):

- :func:`quantile_sweep` (two-model data), as RouteLLM's ``benchmarks.py`` does: the
  router gives each prompt a strong-model score ``s``; the thresholds are the
  ``num_results + 1`` quantile bin edges of ``s`` (``pd.qcut(..., retbins=True)``), and a
  prompt goes to the strong model when ``s >= threshold`` (``>`` for the last edge).
- :func:`willingness_sweep` (any number of models), as RouterBench's predictive routers
  do: with predicted quality ``P[i, j]`` and cost ``C[i, j]`` (USD), prompt ``i`` goes to
  ``argmax_j P[i, j] - lam * C[i, j]``, swept over the willingness to pay ``1 / lam``;
  ties go to the cheaper model. ``lam = 0`` is best predicted quality, ``lam = inf`` the
  cheapest model.
"""

from __future__ import annotations

import numpy as np

#: RouteLLM's default ``--num-results`` (10 bins, so 11 thresholds).
NUM_RESULTS = 10
#: Willingness-to-pay grid: ``lam = scale * 10**k`` for these exponents, plus 0 and inf.
LAMBDA_EXPONENTS = np.linspace(-3.0, 3.0, 61)


def quantile_sweep(s: np.ndarray, strong: int, weak: int,
                   num_results: int = NUM_RESULTS) -> tuple[np.ndarray, np.ndarray]:
    """RouteLLM thresholds over strong-model scores ``s`` ``(n,)``; see the module docstring."""
    s = np.asarray(s, dtype=float)
    thresholds = np.quantile(s, np.linspace(0.0, 1.0, num_results + 1))
    choices = np.empty((len(thresholds), len(s)), dtype=int)
    for k, t in enumerate(thresholds):
        sel = s >= t if k != len(thresholds) - 1 else s > t
        choices[k] = np.where(sel, strong, weak)
    return thresholds, choices


def lambda_grid(mean_quality: np.ndarray, mean_cost: np.ndarray) -> np.ndarray:
    """Prices of quality to sweep, scaled to the data: quality spread / cost spread of the models."""
    dq = float(np.ptp(mean_quality)) or 1.0
    dc = float(np.ptp(mean_cost))
    if dc <= 0:
        return np.array([0.0])
    return np.concatenate(([0.0], (dq / dc) * 10.0 ** LAMBDA_EXPONENTS, [np.inf]))


def willingness_sweep(pred: np.ndarray, costs: np.ndarray, lambdas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """RouterBench-style sweep of ``argmax P - lam C`` (see the module docstring).

    Args:
        pred: ``(n, m)`` predicted quality.
        costs: ``(n, m)`` USD per call.
        lambdas: ``(K,)`` values of ``lam`` (``inf`` = cheapest).
    """
    pred = np.asarray(pred, float)
    costs = np.asarray(costs, float)
    # Ties go to the cheaper model: a tiny cost penalty, far below any quality difference.
    span = float(np.ptp(costs)) or 1.0
    tie = 1e-9 * costs / span
    choices = np.empty((len(lambdas), pred.shape[0]), dtype=int)
    for k, lam in enumerate(lambdas):
        if np.isinf(lam):
            choices[k] = np.argmin(costs - 1e-9 * pred, axis=1)
        else:
            choices[k] = np.argmax(pred - lam * costs - tie, axis=1)
    return np.asarray(lambdas, float), choices
