"""Realised quality and cost of swept thresholds, their bootstrap bounds, and the pick.

Per threshold ``t`` (choices from :mod:`router.calibration.simulate`), on rows ``i = 1..n``
with recorded scores ``s`` and costs ``c``, chosen model ``k_i(t)`` and always-strongest
model ``*`` (the candidate with the highest mean recorded score on these rows):

- realised quality ratio ``R(t) = sum_i s[i, k_i(t)] / sum_i s[i, *]``;
- cost ratio ``sum_i c[i, k_i(t)] / sum_i c[i, *]``;
- miss rate: share of rows with ``s[i, k_i(t)] < s[i, *]`` (the per-request bar miss);
- a rejected request scores 0 and costs 0.

Confidence: the percentile bootstrap (Efron & Tibshirani, *An Introduction to the
Bootstrap*, 1993, ch. 13) over rows: ``B`` resamples of the n rows with replacement, the
same resamples for every threshold, ``R*_b(t)`` recomputed as above (numerator and
denominator on the same resampled rows). The one-sided lower bound at confidence ``1 - a``
is the ``a`` quantile of ``R*_b(t)``; the two-sided interval is the ``a/2`` and ``1 - a/2``
quantiles.

The pick (:func:`pick`) guards against choosing the luckiest of many thresholds (the
winner's curse) with fixed-sequence testing, as in Learn then Test (Angelopoulos, Bates,
Candès, Jordan & Lei, "Learn then Test: Calibrating Predictive Algorithms to Achieve Risk
Control", 2021, sec. 4): per parametrisation, thresholds are tested from the most
conservative (highest) down, and testing stops at the first whose lower bound misses the
target; the pick is the cheapest threshold that passed. With ``k`` parametrisations each
sequence is tested at ``1 - a / k`` (Bonferroni), so the whole procedure holds at
``1 - a`` family-wise, up to the bootstrap's approximation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from router.calibration.errors import CalibrationError, TargetUnreachable
from router.calibration.simulate import REJECTED, Sweep

#: Default bootstrap resamples.
RESAMPLES = 1000


@dataclass
class Point:
    """One threshold's outcome on the rows (ratios are shares, not percentages).

    Attributes:
        param, threshold: the bar (one of :attr:`router.policy.models.QualityBar.KINDS`)
            and its value.
        n: rows. ratio: realised quality ratio. lower: its one-sided lower bound at
        ``confidence``. ci: two-sided interval at ``confidence``. cost_ratio: routed /
        always-strongest USD. miss_rate: share of rows below the strongest's score.
        rejected: rows the engine rejected. share: model -> share of rows routed to it.
    """

    param: str
    threshold: float
    n: int
    ratio: float
    lower: float
    ci: tuple[float, float]
    cost_ratio: float
    miss_rate: float
    confidence: float
    rejected: int = 0
    share: dict[str, float] = field(default_factory=dict)


def strongest(scores: np.ndarray, columns: list[int]) -> int:
    """The column (of ``columns``) with the highest mean score; the first on ties.

    Raises:
        CalibrationError: every candidate's mean score is 0 (no ratio is defined).
    """
    means = scores[:, columns].mean(axis=0)
    if not means.max() > 0:
        raise CalibrationError("every candidate scores 0 on the data: the quality ratio is undefined")
    return columns[int(np.argmax(means))]


def resample_weights(n: int, resamples: int, seed: int) -> np.ndarray:
    """``(B, n)`` bootstrap counts: how often each row is drawn in each resample."""
    rng = np.random.default_rng(seed)
    return rng.multinomial(n, np.full(n, 1.0 / n), size=resamples).astype(np.float64)


def evaluate(sw: Sweep, scores: np.ndarray, costs: np.ndarray, strong: int, models: list[str], *,
             confidence: float, weights: np.ndarray) -> list[Point]:
    """One :class:`Point` per threshold of ``sw`` (see the module docstring).

    Args:
        scores, costs: ``(n, m)`` recorded scores and USD per call.
        strong: column of the always-strongest model.
        weights: ``(B, n)`` from :func:`resample_weights` (shared across sweeps).
    """
    n = scores.shape[0]
    rows = np.arange(n)
    chosen = np.where(sw.choices == REJECTED, 0, sw.choices)
    got = np.where(sw.choices == REJECTED, 0.0, scores[rows, chosen])  # (T, n)
    paid = np.where(sw.choices == REJECTED, 0.0, costs[rows, chosen])
    base_s, base_c = scores[:, strong], costs[:, strong]
    ratio = got.sum(axis=1) / base_s.sum()
    boot = (weights @ got.T) / np.maximum(weights @ base_s, 1e-12)[:, None]  # (B, T)
    a = 1.0 - confidence
    lower = np.quantile(boot, a, axis=0)
    lo, hi = np.quantile(boot, a / 2, axis=0), np.quantile(boot, 1 - a / 2, axis=0)
    cost = paid.sum(axis=1) / base_c.sum() if base_c.sum() > 0 else np.zeros(len(ratio))
    miss = (got < base_s[None, :] - 1e-12).mean(axis=1)
    out = []
    for k, t in enumerate(sw.thresholds):
        counts = np.bincount(chosen[k][sw.choices[k] != REJECTED], minlength=len(models))
        out.append(Point(sw.param, float(t), n, float(ratio[k]), float(lower[k]), (float(lo[k]), float(hi[k])),
                         float(cost[k]), float(miss[k]), confidence, int((sw.choices[k] == REJECTED).sum()),
                         {models[j]: int(c) / n for j, c in enumerate(counts) if c}))
    return out


def pick(points: list[Point], target: float) -> Point:
    """The cheapest point that passes fixed-sequence testing (see the module docstring):
    per ``param``, points in descending threshold order while their lower bound meets
    ``target``. Ties: the higher bound.

    Raises:
        TargetUnreachable: no point passes; the message gives the best bound reached.
    """
    ok = []
    for param in dict.fromkeys(p.param for p in points):
        for p in sorted((p for p in points if p.param == param), key=lambda p: -p.threshold):
            if p.lower + 1e-12 < target:
                break
            ok.append(p)
    if not ok:
        best = max(points, key=lambda p: p.lower)
        why = ("the highest thresholds miss it, so fixed-sequence testing stops before"
               if best.lower + 1e-12 >= target else "the best lower bound is")
        raise TargetUnreachable(
            f"no threshold reaches a realised quality ratio of {target} with {best.confidence:.1%} confidence (each "
            f"test): {why} {best.lower:.4f} ({best.param} {best.threshold}, ratio {best.ratio:.4f}, n {best.n}); "
            "lower the target or the confidence, or add calibration rows")
    return min(ok, key=lambda p: (p.cost_ratio, -p.lower))
