"""``knn``: RouterBench's KNN router. A prompt's predicted quality per model is the mean
recorded score of its ``k`` nearest training prompts by cosine similarity of encoder
embeddings (RouterBench uses k in {5, 10, 40}; 10 here), then swept like any score router."""

from __future__ import annotations

import numpy as np

from router.eval.routers import register
from router.eval.routers.base import LearnedRouter

K = 10
#: Test rows per similarity block (bounds memory: block x n_train floats).
BLOCK = 1024


@register
class KnnRouter(LearnedRouter):
    name = "knn"
    description = f"k={K} nearest neighbours on embeddings"

    def fit_predict(self, x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, seed: int) -> np.ndarray:
        k = min(K, len(x_train))
        out = np.empty((len(x_test), y_train.shape[1]))
        for s in range(0, len(x_test), BLOCK):
            sims = x_test[s:s + BLOCK] @ x_train.T
            nn = np.argpartition(-sims, k - 1, axis=1)[:, :k]
            out[s:s + BLOCK] = y_train[nn].mean(axis=1)
        return out
