"""``zero``: RouterBench's zero router. Its points are the single models; its curve is their
non-decreasing convex hull (mixing two models at random reaches any point on a chord), so
it routes without looking at the prompt. A learned router is only worth it above this curve."""

from __future__ import annotations

import numpy as np

from router.eval.data import EvalData
from router.eval.routers import register
from router.eval.routers.base import Context, EvalRouter, RouterRun


@register
class ZeroRouter(EvalRouter):
    name = "zero"
    description = "NDCH of the single models (RouterBench)"

    def run(self, test: EvalData, ctx: Context) -> RouterRun:
        m = len(test.models)
        order = np.argsort(test.mean_costs, kind="stable")
        choices = np.repeat(order[:, None], test.n, axis=1)
        return RouterRun(self.name, choices, order.astype(float), "model index")
