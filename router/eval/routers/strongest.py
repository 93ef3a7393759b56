"""``strongest``: every prompt to the model with the highest mean score on the rows (one point)."""

from __future__ import annotations

import numpy as np

from router.eval.data import EvalData
from router.eval.routers import register
from router.eval.routers.base import Context, EvalRouter, RouterRun


@register
class StrongestRouter(EvalRouter):
    name = "strongest"
    description = "always the best model on average"

    def run(self, test: EvalData, ctx: Context) -> RouterRun:
        j = test.strong
        return RouterRun(self.name, np.full((1, test.n), j), np.array([0.0]), f"model {test.models[j]}")
