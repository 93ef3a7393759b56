"""``cheapest``: every prompt to the model with the lowest mean cost per call (one point)."""

from __future__ import annotations

import numpy as np

from router.eval.data import EvalData
from router.eval.routers import register
from router.eval.routers.base import Context, EvalRouter, RouterRun


@register
class CheapestRouter(EvalRouter):
    name = "cheapest"
    description = "always the cheapest model"

    def run(self, test: EvalData, ctx: Context) -> RouterRun:
        j = int(np.argmin(test.mean_costs))
        return RouterRun(self.name, np.full((1, test.n), j), np.array([0.0]), f"model {test.models[j]}")
