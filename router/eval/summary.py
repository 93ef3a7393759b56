"""A router run's metrics on its dataset, with bootstrap confidence intervals.

:func:`summarise` turns a :class:`~router.eval.routers.base.RouterRun` into a
:class:`Result`: the curve's points, AIQ (cost-range and max-cost normalisations), and on
two-model data APGR, CPT(50%) and CPT(80%) (definitions and sources in
:mod:`router.eval.metrics`).

``quality`` and ``cost`` summarise a curve by one operating point: the cheapest point
whose quality is at least :data:`BAR` of the strongest single model's (the default
quality bar), else the point of highest quality.

Confidence intervals: percentile bootstrap (Efron & Tibshirani, 1993, ch. 13) over the
test rows, ``B`` resamples with replacement (seeded); the router's choices are held fixed
(the router is not refit), and every reference (single-model means, cost range, weak and
strong quality) is recomputed on each resample; which model is strong stays as on the full rows. 95% intervals: 2.5th and 97.5th percentiles.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from router.eval import metrics
from router.eval.data import EvalData
from router.eval.routers.base import RouterRun

#: Share of the strongest model's quality that ``quality``/``cost`` are read at.
BAR = 0.95
#: Bootstrap resamples by default.
BOOTSTRAP = 200
METRICS = ("aiq", "aiq_maxcost", "apgr", "cpt50", "cpt80", "quality", "cost")


@dataclass
class Result:
    """One router on one dataset (JSON row via :meth:`row`).

    Attributes:
        values: metric name -> value (``None`` where it does not apply); see :data:`METRICS`.
        ci: metric name -> ``[low, high]`` 95% bootstrap interval.
        points: the curve: ``{"threshold", "cost", "quality"}`` per operating point, plus
            ``"share"`` (strong-model calls) and ``"pgr"`` on two-model data.
    """

    dataset: str
    router: str
    n: int
    values: dict[str, float | None]
    ci: dict[str, list[float]] = field(default_factory=dict)
    points: list[dict[str, Any]] = field(default_factory=list)
    fit: str = "none"
    knob: str = ""
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def row(self) -> dict[str, Any]:
        """``{"dataset", "router", "aiq", "apgr", "cpt50", "cpt80", "quality", "cost"}`` plus
        ``aiq_maxcost``, ``n``, ``fit``, ``ci``, ``note`` and the curve ``points``."""
        out: dict[str, Any] = {"dataset": self.dataset, "router": self.router}
        for k in ("aiq", "apgr", "cpt50", "cpt80", "quality", "cost", "aiq_maxcost"):
            out[k] = _round(self.values.get(k))
        out.update(n=self.n, fit=self.fit, knob=self.knob, ci=self.ci, note=self.note or None,
                   points=self.points, **({"extra": self.extra} if self.extra else {}))
        return out


def skipped(data: EvalData, router: str, reason: str) -> Result:
    """A row for a router that could not run: every metric ``None``, the reason in ``note``."""
    return Result(data.name, router, data.n, {k: None for k in METRICS}, note=reason)


def _round(v: float | None) -> float | None:
    """Six significant digits (costs are small: 2.79e-05 USD must not become 2.8e-05)."""
    return None if v is None else float(f"{float(v):.6g}")


def _metrics(q: np.ndarray, c: np.ndarray, share: np.ndarray | None, model_q: np.ndarray, model_c: np.ndarray,
             strong: int, weak: int) -> dict[str, float | None]:
    """Metrics from point means ``q``/``c``/``share`` ``(K,)`` and model means ``(m,)``."""
    out: dict[str, float | None] = dict.fromkeys(METRICS)
    lo, hi = float(model_c.min()), float(model_c.max())
    distinct = len({(round(float(a), 12), round(float(b), 12)) for a, b in zip(c, q)})
    if distinct >= 2:
        out["aiq"] = metrics.aiq(c, q, lo, hi)
        out["aiq_maxcost"] = metrics.aiq_maxcost(c, q, lo, hi)
    if share is not None:
        qw, qs = float(model_q[weak]), float(model_q[strong])
        if distinct >= 2:
            out["apgr"] = metrics.apgr(share, q, qw, qs)
            out["cpt50"] = metrics.cpt(share, q, qw, qs, 0.5)
            out["cpt80"] = metrics.cpt(share, q, qw, qs, 0.8)
    reach = np.flatnonzero(q >= BAR * float(model_q[strong]) - 1e-12)
    # cheapest point over the bar; among equal costs the best quality
    k = int(reach[np.lexsort((-q[reach], c[reach]))[0]]) if len(reach) else int(np.argmax(q))
    out["quality"], out["cost"] = float(q[k]), float(c[k])
    return out


def summarise(data: EvalData, run: RouterRun, *, bootstrap: int = BOOTSTRAP, seed: int = 0) -> Result:
    """Metrics of ``run`` on ``data`` with ``bootstrap`` resamples (0: no intervals)."""
    rows = np.arange(data.n)
    qk = data.scores[rows, run.choices]  # (K, n)
    ck = data.costs[rows, run.choices]
    sk = (run.choices == data.strong).astype(float) if data.two_model else None
    strong, weak = data.strong, data.weak
    values = _metrics(qk.mean(1), ck.mean(1), None if sk is None else sk.mean(1),
                      data.mean_scores, data.mean_costs, strong, weak)
    qw, qs = float(data.mean_scores[weak]), float(data.mean_scores[strong])

    def two_model(share: float | None, q: float) -> dict[str, Any]:
        if share is None:
            return {}
        gap = metrics.pgr(q, qw, qs)
        return {"share": _round(share), "pgr": None if gap is None else _round(gap)}

    points = [{"threshold": _round(t) if np.isfinite(t) else str(t), "cost": _round(c), "quality": _round(q),
               **two_model(s, q)}
              for t, c, q, s in zip(run.thresholds, ck.mean(1), qk.mean(1),
                                    sk.mean(1) if sk is not None else [None] * len(qk))]
    ci = _bootstrap(data, qk, ck, sk, bootstrap, seed) if bootstrap and data.n > 1 else {}
    return Result(data.name, run.router, data.n, values, ci, points, run.fit, run.knob, extra=run.extra)


def _bootstrap(data: EvalData, qk: np.ndarray, ck: np.ndarray, sk: np.ndarray | None, b: int,
               seed: int) -> dict[str, list[float]]:
    rng = np.random.default_rng(seed)
    n = data.n
    weights = rng.multinomial(n, np.full(n, 1.0 / n), size=b).T / n  # (n, B): row weights per resample
    q, c = qk @ weights, ck @ weights  # (K, B)
    s = None if sk is None else sk @ weights
    mq, mc = data.scores.T @ weights, data.costs.T @ weights  # (m, B)
    draws: dict[str, list[float]] = {k: [] for k in METRICS}
    for j in range(b):
        vals = _metrics(q[:, j], c[:, j], None if s is None else s[:, j], mq[:, j], mc[:, j], data.strong, data.weak)
        for k, v in vals.items():
            if v is not None:
                draws[k].append(v)
    return {k: [_round(np.percentile(v, 2.5)), _round(np.percentile(v, 97.5))]
            for k, v in draws.items() if len(v) >= max(10, b // 2)}
