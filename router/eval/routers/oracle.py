"""``oracle``: knows the recorded scores. Swept by willingness to pay over the true
scores (ties to the cheaper model): at ``lam = 0`` every prompt goes to the cheapest model
with the best recorded score (RouterBench's oracle). On two-model data its curve rises
linearly to that point and stays flat, which is RouteLLM's ``get_optimal_accuracy``."""

from __future__ import annotations

import numpy as np

from router.eval.data import EvalData
from router.eval.routers import register
from router.eval.routers.base import Context, ScoreRouter


@register
class OracleRouter(ScoreRouter):
    name = "oracle"
    description = "recorded scores (upper bound)"
    two_model_sweep = "lambda"

    def predict(self, test: EvalData, ctx: Context) -> tuple[np.ndarray, str]:
        return test.scores.astype(float), "none"
