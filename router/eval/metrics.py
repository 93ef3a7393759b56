"""Cost-quality metrics of a router's curve.

A router swept over its threshold (willingness to pay) gives operating points
``(cost, quality)``: mean USD per call and mean recorded score over the same rows.

RouterBench (Hu et al., 2024, "RouterBench: A Benchmark for Multi-LLM Routing System",
arXiv:2403.12031, section 3.2; code ``withmartian/routerbench``, ``evaluate_routers.py``):

- **Non-decreasing convex hull (NDCH)**: the upper convex hull of the points, kept only
  where quality does not decrease with cost. Any point on it is reachable by mixing two
  operating points at random, so it is the curve a router "offers".
- **AIQ** (average improvement in quality): the area under the NDCH over the cost range
  ``[c_min, c_max]``, divided by ``c_max - c_min`` (the paper's definition). Here the
  range is that of the single models on the same rows, for every router of a dataset, so
  AIQs of one dataset compare. Left of the router's cheapest point the curve counts 0
  (the code integrates from it); right of its dearest point it stays flat (the code
  appends ``(max_x, last_y)``). ``aiq_maxcost`` divides the same area by ``c_max``
  instead, as RouterBench's code does (``calculate_area_under_curve(ndch) / max_x_value``).

RouteLLM (Ong et al., 2024, "RouteLLM: Learning to Route LLMs with Preference Data",
arXiv:2406.18665, section 5.1; code ``lm-sys/RouteLLM``, ``routellm/evals/evaluate.py``),
for two models, x = share of calls sent to the strong model:

- **PGR** of a point: ``(q - q_weak) / (q_strong - q_weak)``.
- **APGR**: ``(AUC - weak_auc) / (strong_auc - weak_auc)`` with every AUC taken by
  ``np.trapz`` over the router's points sorted by strong share (``apgr_metric``). A curve
  that stops short of 100% strong calls (the oracle) is extended flat to 100%: budget it
  does not need is left unused, as RouteLLM's ``get_optimal_accuracy`` does.
- **CPT(x%)**: the strong-call share needed to reach ``q_weak + x (q_strong - q_weak)``,
  linearly interpolated on the curve (``pct_call_metric`` uses ``np.interp``; here the
  first crossing, which is the same on a monotone curve and defined on any curve).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_EPS = 1e-12


@dataclass(frozen=True)
class Curve:
    """Operating points of one router on one dataset, in threshold order.

    Attributes:
        cost: ``(K,)`` mean USD per call at each point.
        quality: ``(K,)`` mean recorded score in [0, 1] at each point.
        share: ``(K,)`` share of calls sent to the strong model (two-model data), else ``None``.
    """

    cost: np.ndarray
    quality: np.ndarray
    share: np.ndarray | None = None


def ndch(cost: np.ndarray, quality: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The non-decreasing convex hull of points (RouterBench, see module docstring).

    Args:
        cost: ``(K,)`` x values (USD per call).
        quality: ``(K,)`` y values.

    Returns:
        ``(hull_cost, hull_quality)``, sorted by cost, strictly increasing in both.
    """
    order = np.lexsort((-np.asarray(quality, float), np.asarray(cost, float)))
    hull: list[tuple[float, float]] = []
    for x, y in zip(np.asarray(cost, float)[order], np.asarray(quality, float)[order]):
        if hull and y <= hull[-1][1] + _EPS:
            continue  # not better than a cheaper (or equal-cost) point
        while len(hull) >= 2:
            (x1, y1), (x2, y2) = hull[-2], hull[-1]
            if (x2 - x1) * (y - y1) - (y2 - y1) * (x - x1) >= 0:
                hull.pop()  # the middle point lies on or under the chord
            else:
                break
        hull.append((x, y))
    h = np.array(hull, dtype=float).reshape(-1, 2)
    return h[:, 0], h[:, 1]


def hull_area(cost: np.ndarray, quality: np.ndarray, lo: float, hi: float) -> float:
    """Area under the NDCH of the points over ``[lo, hi]`` (USD x quality).

    The hull counts 0 left of its first point and stays flat right of its last.
    """
    hx, hy = ndch(cost, quality)
    if hi <= lo:
        return 0.0
    start = max(lo, hx[0])
    if start >= hi:
        return 0.0
    xs = np.concatenate(([start], hx[(hx > start) & (hx < hi)], [hi]))
    ys = np.interp(xs, hx, hy)  # flat beyond the last hull point
    return float(np.trapezoid(ys, xs))


def aiq(cost: np.ndarray, quality: np.ndarray, c_min: float, c_max: float) -> float | None:
    """RouterBench AIQ normalised by the cost range ``c_max - c_min``; ``None`` if the range is empty."""
    if c_max - c_min <= _EPS * max(1.0, abs(c_max)):
        return None
    return hull_area(cost, quality, c_min, c_max) / (c_max - c_min)


def aiq_maxcost(cost: np.ndarray, quality: np.ndarray, c_min: float, c_max: float) -> float | None:
    """The same area divided by ``c_max`` (RouterBench's code); ``None`` if the range is empty."""
    if c_max - c_min <= _EPS * max(1.0, abs(c_max)) or c_max <= 0:
        return None
    return hull_area(cost, quality, c_min, c_max) / c_max


def pgr(quality: float | np.ndarray, q_weak: float, q_strong: float) -> float | np.ndarray | None:
    """RouteLLM's performance gap recovered; ``None`` when the two models tie."""
    if abs(q_strong - q_weak) <= _EPS:
        return None
    return (quality - q_weak) / (q_strong - q_weak)


def _share_curve(share: np.ndarray, quality: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(share, kind="stable")
    x, y = np.asarray(share, float)[order], np.asarray(quality, float)[order]
    if x[-1] < 1.0 - _EPS:
        x, y = np.append(x, 1.0), np.append(y, y[-1])
    return x, y


def apgr(share: np.ndarray, quality: np.ndarray, q_weak: float, q_strong: float) -> float | None:
    """RouteLLM APGR over points ``(strong share, quality)`` (see module docstring)."""
    if abs(q_strong - q_weak) <= _EPS:
        return None
    x, y = _share_curve(share, quality)
    auc = np.trapezoid(y, x)
    weak_auc = np.trapezoid(np.full_like(x, q_weak), x)
    strong_auc = np.trapezoid(np.full_like(x, q_strong), x)
    if abs(strong_auc - weak_auc) <= _EPS:
        return None
    return float((auc - weak_auc) / (strong_auc - weak_auc))


def cpt(share: np.ndarray, quality: np.ndarray, q_weak: float, q_strong: float, pct: float) -> float | None:
    """CPT(pct): share of strong calls (0-1) to recover ``pct`` (0-1) of the gap; ``None`` if never reached."""
    if abs(q_strong - q_weak) <= _EPS:
        return None
    target = q_weak + pct * (q_strong - q_weak)
    x, y = _share_curve(share, quality)
    if y[0] >= target - _EPS:
        return float(x[0])
    for i in range(1, len(x)):
        if y[i] >= target - _EPS:
            if y[i] - y[i - 1] <= _EPS:
                return float(x[i])
            return float(x[i - 1] + (target - y[i - 1]) * (x[i] - x[i - 1]) / (y[i] - y[i - 1]))
    return None
