"""Calibration with the shipped heads on ~200 real RouterBench rows (skipped without torch
or the shared data)."""

from __future__ import annotations

import numpy as np
import pytest

from router.calibration import calibrate, load_rows
from tests.calibrate.test_calibrate import GRIDS

pytest.importorskip("torch", reason="the classifier extra (torch) is not installed")


def test_shipped_heads_calibrate_a_real_route(data_dir):
    from gateway.commands.calibrate import _default_policy
    from router.classify import load_predictor

    rows = load_rows([data_dir / "routerbench" / "arc_challenge_train.csv"])
    rows = rows.subset(np.arange(0, rows.n, 5)[:200])
    heads = load_predictor()
    try:
        res = calibrate(_default_policy(rows), "auto", rows, heads, target=0.9, confidence=0.9, resamples=500,
                        grids=GRIDS)
    finally:
        heads.close()
    p = res.chosen
    assert p.n == 200 and res.strongest == "gpt-4-1106-preview"
    assert p.lower >= 0.9 and p.ci[0] <= p.ratio <= p.ci[1]
    assert p.cost_ratio < 1.0 and 0 <= p.miss_rate < 0.5
    assert sum(p.share.values()) == pytest.approx(1.0)
