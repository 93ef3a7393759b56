"""``random``: RouteLLM's random router. Each prompt gets a uniform random score per model
(seeded), swept like any score router: on two-model data the strong share then grows
linearly with the threshold quantile, so its APGR is about 0.5 (RouteLLM's reference)."""

from __future__ import annotations

import numpy as np

from router.eval.data import EvalData
from router.eval.routers import register
from router.eval.routers.base import Context, ScoreRouter


@register
class RandomRouter(ScoreRouter):
    name = "random"
    description = "uniform random scores (seeded)"

    def predict(self, test: EvalData, ctx: Context) -> tuple[np.ndarray, str]:
        rng = np.random.default_rng(ctx.seed)
        return rng.uniform(0.0, 1.0, size=test.scores.shape), "none"
