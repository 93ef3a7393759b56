"""``mf``: matrix factorisation in the RouteLLM style (Ong et al., 2024, section 4.1.1;
``routellm/routers/matrix_factorization/model.py``).

RouteLLM scores a (model, prompt) pair as ``w^T (v_m * (W e_q))``: a learned model
embedding ``v_m`` times a linear projection of the prompt's text embedding ``e_q``, and
trains on pairwise preferences (Bradley-Terry: ``P(a beats b) = sigmoid(s_a - s_b)``).
Outcome data gives a score per model, so here the same bilinear score plus a per-model
bias is trained pointwise (``P(good answer) = sigmoid(s_m + b_m)``, binary cross-entropy
against the recorded score), which keeps calibrated per-model qualities for the cost
sweep over many models; on two models the ranking by ``s_strong - s_weak`` is RouteLLM's.
Full-batch Adam in numpy, float32 (dimension 64, 300 steps, lr 0.01, L2 1e-4), seeded.
"""

from __future__ import annotations

import numpy as np

from router.eval.routers import register
from router.eval.routers.base import LearnedRouter

DIM = 64
STEPS = 300
LR = 0.01
L2 = 1e-4


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(z, -30, 30)))


@register
class MfRouter(LearnedRouter):
    name = "mf"
    description = "bilinear matrix factorisation (RouteLLM-style)"

    def fit_predict(self, x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, seed: int) -> np.ndarray:
        rng = np.random.default_rng(seed)
        n, d = x_train.shape
        m = y_train.shape[1]
        f32 = np.float32
        params = {
            "W": rng.normal(0, 1 / np.sqrt(d), (DIM, d)).astype(f32),   # prompt projection
            "U": rng.normal(0, 1 / np.sqrt(DIM), (m, DIM)).astype(f32),  # model embedding (w * v_m folded in)
            "b": np.log(np.clip(y_train.mean(0), 1e-3, 1 - 1e-3) / np.clip(1 - y_train.mean(0), 1e-3, 1)).astype(f32),
        }
        adam = {k: (np.zeros_like(v), np.zeros_like(v)) for k, v in params.items()}
        x = np.ascontiguousarray(x_train, dtype=f32)
        y_train = np.asarray(y_train, dtype=f32)
        for t in range(1, STEPS + 1):
            z = x @ params["W"].T
            g = (_sigmoid(z @ params["U"].T + params["b"]) - y_train) / n  # dBCE/dlogit
            grads = {"U": g.T @ z + L2 * params["U"], "b": g.sum(0),
                     "W": (g @ params["U"]).T @ x + L2 * params["W"]}
            for k, gk in grads.items():
                m1, m2 = adam[k]
                m1 = 0.9 * m1 + 0.1 * gk
                m2 = 0.999 * m2 + 0.001 * gk * gk
                adam[k] = (m1, m2)
                params[k] = params[k] - LR * (m1 / (1 - 0.9 ** t)) / (np.sqrt(m2 / (1 - 0.999 ** t)) + 1e-8)
        x_test = np.asarray(x_test, dtype=f32)
        return _sigmoid((x_test @ params["W"].T) @ params["U"].T + params["b"]).astype(float)
