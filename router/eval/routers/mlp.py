"""``mlp``: RouterBench's MLP router. A one-hidden-layer network (scikit-learn
``MLPRegressor``, 128 ReLU units, Adam, L2 1e-3, early stopping on 10% of the fit rows from 500 rows up)
maps the encoder embedding to every model's score at once, then swept like any score router."""

from __future__ import annotations

import numpy as np

from router.eval.errors import RouterUnavailable
from router.eval.routers import register
from router.eval.routers.base import LearnedRouter


@register
class MlpRouter(LearnedRouter):
    name = "mlp"
    description = "MLP regressor on embeddings"

    def fit_predict(self, x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, seed: int) -> np.ndarray:
        try:
            from sklearn.neural_network import MLPRegressor
        except ImportError as exc:
            raise RouterUnavailable("scikit-learn is not installed: pip install 'mixroute[eval]'") from exc
        import warnings

        from sklearn.exceptions import ConvergenceWarning

        net = MLPRegressor(hidden_layer_sizes=(128,), alpha=1e-3, learning_rate_init=1e-3, max_iter=200,
                           early_stopping=len(x_train) >= 500, validation_fraction=0.1, n_iter_no_change=10,
                           random_state=seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            net.fit(x_train, y_train)
        pred = net.predict(x_test).reshape(len(x_test), -1)
        return np.clip(pred, 0.0, 1.0)
