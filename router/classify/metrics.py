"""Held-out metrics of the heads, in plain Python (no numpy/sklearn dependency).

- ROC AUC: the Mann-Whitney U statistic with average ranks for ties (Hanley & McNeil 1982).
- Macro-F1: unweighted mean of per-class F1 over the classes present in the truth.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def auc(scores: Sequence[float], labels: Sequence[int]) -> float | None:
    """ROC AUC of ``scores`` for binary ``labels``; ``None`` when one class is absent."""
    pairs = sorted(zip(scores, labels), key=lambda p: p[0])
    n_pos = sum(1 for _, y in pairs if y)
    n_neg = len(pairs) - n_pos
    if n_pos == 0 or n_neg == 0:
        return None
    rank_sum, i = 0.0, 0
    while i < len(pairs):
        j = i
        while j + 1 < len(pairs) and pairs[j + 1][0] == pairs[i][0]:
            j += 1
        avg_rank = (i + j) / 2 + 1
        rank_sum += avg_rank * sum(1 for k in range(i, j + 1) if pairs[k][1])
        i = j + 1
    return (rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def macro_f1(pred: Sequence[int], truth: Sequence[int]) -> float:
    """Macro-averaged F1 over the classes that occur in ``truth``."""
    f1s = []
    for c in sorted(set(truth)):
        tp = sum(1 for p, t in zip(pred, truth) if p == c and t == c)
        fp = sum(1 for p, t in zip(pred, truth) if p == c and t != c)
        fn = sum(1 for p, t in zip(pred, truth) if p != c and t == c)
        f1s.append(2 * tp / (2 * tp + fp + fn) if tp else 0.0)
    return sum(f1s) / len(f1s) if f1s else 0.0


def brier(probs: Sequence[float], labels: Sequence[float]) -> float:
    return sum((p - y) ** 2 for p, y in zip(probs, labels)) / max(1, len(probs))


def ece(probs: Sequence[float], labels: Sequence[float], bins: int = 10) -> float:
    """Expected calibration error with equal-width bins (Guo et al. 2017)."""
    total, err = len(probs), 0.0
    for b in range(bins):
        idx = [i for i, p in enumerate(probs) if b / bins <= p < (b + 1) / bins or (b == bins - 1 and p == 1.0)]
        if idx:
            err += len(idx) / total * abs(sum(probs[i] for i in idx) / len(idx) - sum(labels[i] for i in idx) / len(idx))
    return err


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    n = len(x)
    if n < 2:
        return math.nan
    mx, my = sum(x) / n, sum(y) / n
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y))
    sx = math.sqrt(sum((a - mx) ** 2 for a in x))
    sy = math.sqrt(sum((b - my) ** 2 for b in y))
    return sxy / (sx * sy) if sx and sy else math.nan
