"""Calibrate a route's quality bar so the *realised* quality ratio meets a target.

A relative bar ``target: 0.95`` applied to predicted qualities does not make the routed
traffic reach 95% of the strongest model's realised quality. :func:`calibrate` picks the
bar from outcome data instead:

1. predict every row once (the heads in batches, cached: :mod:`.predictions`);
2. replay the rows through :meth:`router.engine.Router.decide` with the route's bar swept
   over ``min_quality`` (absolute), ``target`` (relative), ``willingness_to_pay``
   (cost-quality trade-off) and ``route_target`` (relative, over the route's traffic)
   grids (:mod:`.simulate`);
3. score each threshold with the recorded outcomes and bound its realised ratio with a
   percentile bootstrap over rows (Efron & Tibshirani 1993); pick the cheapest threshold
   whose one-sided lower bound is at least the target, with fixed-sequence testing from the
   highest threshold down so the pick holds at ``confidence`` family-wise (Learn then
   Test, Angelopoulos et al. 2021) (:mod:`.bound`);
4. optionally check it on held-out rows, and write it with its evidence into the policy
   (``quality_bar.calibrated``, :mod:`.write`).

Whichever parametrisation is cheaper at the target wins; see docs/CALIBRATION.md.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from router.calibration.bound import RESAMPLES, Point, evaluate, pick, resample_weights, strongest
from router.calibration.errors import CalibrationError, TargetUnreachable
from router.calibration.simulate import (GRIDS, Progress, Sweep, bar_of, data_columns, decide_rows, kept_settings,
                                        load_rows, sweep, with_bar)
from router.eval.data import EvalData
from router.policy.loader import LoadedPolicy
from router.policy.models import QualityBar, RouteConfig

__all__ = ["Calibration", "CalibrationError", "TargetUnreachable", "calibrate", "evidence_bar", "load_rows",
           "route_columns", "split_holdout"]


@dataclass
class Calibration:
    """The outcome of :func:`calibrate`.

    Attributes:
        route: the route. strongest: the always-strongest model on the calibration rows.
        chosen: the picked threshold's outcome on the calibration rows.
        points: every swept threshold's outcome (every parametrisation).
        current: the route's bar as it is in the policy, on the same rows.
        confidence: family-wise confidence of the pick (each test of the sweep runs at
            ``1 - (1 - confidence) / parametrisations``; ``chosen.confidence``).
        method: the bound and the testing procedure, for the evidence.
        holdout, holdout_current: the picked bar and the current bar on the held-out rows.
        window, uncertainty_z, allocation: the route's ``quality_bar`` settings, kept by a
            picked ``route_target`` bar.
    """

    route: str
    strongest: str
    chosen: Point
    points: list[Point]
    current: Point
    confidence: float
    method: str
    holdout: Point | None = None
    holdout_current: Point | None = None
    window: int | None = None
    uncertainty_z: float | None = None
    allocation: str | None = None


def split_holdout(data: EvalData, fraction: float, seed: int = 0) -> tuple[EvalData, EvalData | None]:
    """``(calibration, held-out)`` rows: a row is held out when a hash of its normalised
    prompt and ``seed`` falls below ``fraction`` (duplicates land on the same side)."""
    from backends.data import normalise_prompt

    if fraction <= 0:
        return data, None
    u = np.array([int(hashlib.sha256(f"{seed}:{normalise_prompt(p)}".encode()).hexdigest()[:8], 16) / 2 ** 32
                  for p in data.prompts])
    held = u < fraction
    if held.all() or not held.any():
        raise CalibrationError(f"--holdout {fraction} leaves no rows on one side ({data.n} rows)")
    return data.subset(np.flatnonzero(~held)), data.subset(np.flatnonzero(held))


def route_columns(loaded: LoadedPolicy, route: str, models: list[str]) -> tuple[RouteConfig, dict[str, int]]:
    """Route ``route`` and its backends' data columns (:func:`.simulate.data_columns`),
    checked before any prediction is made.

    Raises:
        CalibrationError: an unknown route; a candidate with no model in the data; a route
            whose candidates all stand for one data model (one backend: every request goes
            to it, so no bar changes anything).
    """
    r = loaded.policy.route(route)
    if r is None:
        known = ", ".join(x.name for x in loaded.policy.routes)
        raise CalibrationError(f"{loaded.source}: no route '{route}' (routes: {known})")
    columns = data_columns(loaded, r, models)
    if len(set(columns.values())) < 2:
        if len(r.backends) == 1:
            raise CalibrationError(f"route '{route}' has one backend ({r.backends[0]}): every request goes to it, "
                                   "so there is nothing to calibrate (a quality bar chooses between backends)")
        only = models[next(iter(columns.values()))]
        raise CalibrationError(f"route '{route}': its backends ({', '.join(r.backends)}) all stand for the data "
                               f"model {only!r}, so every choice scores the same and there is nothing to calibrate")
    return r, columns


def _one(loaded: LoadedPolicy, route: str, bar: QualityBar, data: EvalData, predictor: Any, columns: dict[str, int],
         strong: int, confidence: float, resamples: int, seed: int) -> Point:
    choices = asyncio.run(decide_rows(with_bar(loaded, route, bar), route, data.prompts, predictor, columns))
    param = bar.kind
    sw = Sweep(param, np.array([getattr(bar, param)]), choices[None, :])
    weights = resample_weights(data.n, resamples, seed)
    return evaluate(sw, data.scores, data.costs, strong, data.models, confidence=confidence, weights=weights)[0]


def calibrate(loaded: LoadedPolicy, route: str, data: EvalData, predictor: Any, *, target: float = 0.95,
              confidence: float = 0.9, resamples: int = RESAMPLES, seed: int = 0, holdout: float = 0.0,
              grids: dict[str, np.ndarray] | None = None, cache: Path | None = None,
              progress: Progress | None = None) -> Calibration:
    """Pick route ``route``'s bar on ``data`` (see the module docstring).

    Args:
        predictor: a :class:`router.predict.Predictor`; one with ``classify_batch`` (the
            heads) is run once per prompt in batches, cached in ``cache`` when given.
        target: realised quality ratio to meet, in (0, 1]. confidence: of its lower bound.
        resamples: bootstrap resamples (>= 500 advised). holdout: share of rows held out.

    Raises:
        CalibrationError: as :func:`route_columns`; a bad holdout.
        TargetUnreachable: no threshold meets the target with the confidence.
    """
    from router.calibration.predictions import Replayed, precompute

    r, columns = route_columns(loaded, route, data.models)
    calib, held = split_holdout(data, holdout, seed)
    if hasattr(predictor, "classify_batch"):
        tick = (lambda done, total: progress("heads", done, total)) if progress else None
        predictor = Replayed(predictor, precompute(predictor, data.prompts, cache=cache, progress=tick))
    strong = strongest(calib.scores, sorted(set(columns.values())))
    weights = resample_weights(calib.n, resamples, seed)
    grids = grids or GRIDS
    each = 1 - (1 - confidence) / len(grids)  # Bonferroni over the parametrisations' test sequences
    points: list[Point] = []
    for sw in sweep(loaded, route, calib.prompts, predictor, columns, grids, progress):
        points.extend(evaluate(sw, calib.scores, calib.costs, strong, calib.models, confidence=each,
                               weights=weights))
    try:
        chosen = pick(points, target)
    except TargetUnreachable as exc:
        exc.points = points
        raise
    args = (predictor, columns, strong, confidence, resamples, seed)
    current = _one(loaded, route, r.quality_bar, calib, *args)
    method = (f"percentile bootstrap over rows, B={resamples} (Efron & Tibshirani 1993); fixed-sequence "
              f"testing over {len(grids)} parametrisations at {each:.4g} each (Learn then Test, Angelopoulos "
              "et al. 2021)")
    out = Calibration(route, data.models[strong], chosen, points, current, confidence, method,
                      window=r.quality_bar.window, uncertainty_z=r.quality_bar.uncertainty_z,
                      allocation=r.quality_bar.allocation)
    if held is not None:
        out.holdout = _one(loaded, route, bar_of(chosen.param, chosen.threshold, out.window, out.uncertainty_z, out.allocation),
                           held, *args)
        out.holdout_current = _one(loaded, route, r.quality_bar, held, *args)
    return out


def evidence_bar(result: Calibration, target: float, data: list[str]) -> dict[str, Any]:
    """The ``quality_bar`` mapping to write: the picked threshold and its evidence."""
    p = result.chosen
    return {p.param: p.threshold, **kept_settings(p.param, result.window, result.uncertainty_z, result.allocation), "calibrated": {
        "ratio_target": target, "confidence": result.confidence, "ratio": round(p.ratio, 4),
        "ratio_lower_bound": round(p.lower, 4), "cost_ratio": round(p.cost_ratio, 4),
        "miss_rate": round(p.miss_rate, 4), "n": p.n, "method": result.method,
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d"), "data": list(data)}}
