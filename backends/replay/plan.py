"""The policy ``mixroute replay`` serves: one ``replay`` backend per model of the data,
and an ``auto`` route over all of them.

Per backend: ``name`` = :func:`backend_name` of the model, ``quality`` = the model's mean
recorded score over all rows of the data (the prior the baseline predictor routes on),
and ``pricing``: the model's token prices fitted to its recorded costs
(:func:`token_prices`) where they explain them, else ``per_request`` = its per-call price
from :func:`per_call_prices`. Token prices let the engine see what a call of this prompt
costs: GPT-4's recorded calls cost 5.1e-3 USD on arc_challenge, 9.4e-3 on mbpp and 3.5e-3
on winogrande, a difference a flat per-call price hides. What the backend bills stays the
recorded cost of the call (:mod:`backends.replay.backend`); the prices only inform the
decision.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from backends.data import Dataset
from backends.openai_shapes import estimate_tokens

#: USD per 1M tokens (input and output alike) attached to models whose data records no
#: cost. GPT-4 and Mixtral: the blended prices the RouteLLM paper uses (about $24.7 and
#: $0.24 per 1M tokens).
PRICE_PER_1M_TOKENS = {
    "gpt-4-1106-preview": 24.7,
    "mistralai/Mixtral-8x7B-Instruct-v0.1": 0.24,
}
#: USD per 1M tokens for any other model without recorded cost (e.g. RouterDC's 7-8B
#: open models): a flat assumed price, not a measured one, so cost is proportional to
#: tokens and equal across those models.
DEFAULT_PRICE_PER_1M_TOKENS = 0.20

_UNSAFE = re.compile(r"[^A-Za-z0-9._:/@-]")
#: Pattern of policy names (:data:`backends.fields.NAME_PATTERN`).
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@-]{0,127}$")
ROUTE = "auto"


def backend_name(model: str, taken: set[str] = frozenset()) -> str:
    """A policy-safe backend name for ``model``, distinct from ``taken`` and from ``auto``.

    Characters outside ``[A-Za-z0-9._:/@-]`` become ``-``; a name not starting with a
    letter or digit gets an ``m`` prefix; at most 128 characters; a clash gets ``-2``, ``-3``...
    """
    name = _UNSAFE.sub("-", model)
    if not name[:1].isalnum() or not name[:1].isascii():
        name = "m" + name
    name = name[:128]
    base, i = name, 2
    while name in taken or name == ROUTE:
        suffix = f"-{i}"
        name = base[:128 - len(suffix)] + suffix
        i += 1
    assert _NAME.match(name), name
    return name


#: Token prices are used only where they explain the recorded costs this well (R^2 of the
#: fit) over at least :data:`MIN_FIT_ROWS` calls; RouterBench's fit at 0.97-0.98 per model.
MIN_FIT_R2 = 0.9
MIN_FIT_ROWS = 20


def token_prices(ds: Dataset) -> dict[str, tuple[float, float]]:
    """USD per 1M input and per 1M output tokens for each model whose recorded costs they
    explain: a least-squares fit, through the origin, of each recorded call's cost on its
    estimated prompt and response tokens (:func:`backends.openai_shapes.estimate_tokens`,
    the same estimate the engine prices a request with), both coefficients at least 0 (a
    negative one is set to 0 and the other refitted alone).

    Returns:
        ``{model: (input_per_1m, output_per_1m)}`` for the models with at least
        :data:`MIN_FIT_ROWS` recorded calls that have a response, fitted with R^2 at least
        :data:`MIN_FIT_R2`; others are left out (priced per call).
    """
    import numpy as np

    out: dict[str, tuple[float, float]] = {}
    prompt_tokens = [estimate_tokens(r.prompt) for r in ds.rows]
    for m in ds.models:
        x, y = [], []
        for r, pt in zip(ds.rows, prompt_tokens):
            cost, answer = r.costs.get(m), r.responses.get(m)
            if cost is not None and answer is not None:
                x.append((pt, estimate_tokens(answer)))
                y.append(cost)
        if len(y) < MIN_FIT_ROWS:
            continue
        X, Y = np.array(x, float), np.array(y, float)
        coef = np.linalg.lstsq(X, Y, rcond=None)[0]
        if (coef < 0).any():  # refit on the other column alone
            keep = int(np.argmax(coef))
            only = np.linalg.lstsq(X[:, [keep]], Y, rcond=None)[0][0]
            coef = np.zeros(2)
            coef[keep] = max(only, 0.0)
        total = float(((Y - Y.mean()) ** 2).sum())
        r2 = 1.0 - float(((Y - X @ coef) ** 2).sum()) / total if total > 0 else 0.0
        if r2 >= MIN_FIT_R2 and coef.any():
            out[m] = (round(float(coef[0]) * 1e6, 6), round(float(coef[1]) * 1e6, 6))
    return out


def per_call_prices(ds: Dataset) -> tuple[dict[str, float], str]:
    """USD per call for each model, and where the figure comes from.

    Returns:
        ``(prices, source)``: with recorded costs, ``source == "recorded"`` and the price
        is the model's mean recorded cost per call; otherwise ``source == "price_list"``
        and the price is :data:`PRICE_PER_1M_TOKENS` (or the default) times the mean
        estimated tokens per call (prompt plus recorded response, ceil(chars / 4) each) / 1e6.
    """
    if ds.has_costs:
        return {m: ds.mean_cost(m) or 0.0 for m in ds.models}, "recorded"
    prices = {}
    n = max(len(ds.rows), 1)
    prompt_tokens = sum(estimate_tokens(r.prompt) for r in ds.rows) / n
    for m in ds.models:
        answer_tokens = sum(estimate_tokens(r.responses.get(m) or "") for r in ds.rows) / n
        per_1m = PRICE_PER_1M_TOKENS.get(m, DEFAULT_PRICE_PER_1M_TOKENS)
        prices[m] = per_1m * (prompt_tokens + answer_tokens) / 1e6
    return prices, "price_list"


@dataclass
class ReplayPlan:
    """What a replay run serves and how it is scored.

    Attributes:
        dataset: all rows of the data (the ``--data`` datasets combined).
        data: the data paths (absolute), as written into the policy.
        names: backend name -> model.
        prices: model -> USD per call (used for rows that record no cost).
        price_source: ``recorded`` or ``price_list`` (see :func:`per_call_prices`).
        token_prices: model -> (USD per 1M input, per 1M output tokens) where
            :func:`token_prices` fits them; the policy prices those models per token.
    """

    dataset: Dataset
    data: list[Path]
    names: dict[str, str]
    prices: dict[str, float]
    price_source: str
    token_prices: dict[str, tuple[float, float]] = field(default_factory=dict)

    @classmethod
    def build(cls, dataset: Dataset, data: list[Path]) -> "ReplayPlan":
        names: dict[str, str] = {}
        for m in dataset.models:
            names[backend_name(m, set(names))] = m
        prices, source = per_call_prices(dataset)
        fitted = token_prices(dataset) if source == "recorded" else {}
        return cls(dataset, [Path(p).resolve() for p in data], names, prices, source, fitted)

    def model_of(self, backend: str) -> str | None:
        """The data model a backend name stands for (the name itself if it is a model)."""
        if backend in self.names:
            return self.names[backend]
        return backend if backend in self.dataset.models else None

    def policy(self, target: float = 0.95) -> dict:
        """The policy document (``version: 1``) as a dict."""
        backends = [{
            "name": name,
            "kind": "replay",
            "model": model,
            "data": [str(p) for p in self.data],
            "quality": round(min(max(self.dataset.mean_score(model), 0.0), 1.0), 6),
            "pricing": self._pricing(model),
        } for name, model in self.names.items()]
        route = {"name": ROUTE, "backends": list(self.names), "quality_bar": {"route_target": target},
                 # No figure here: `mixroute calibrate --write` replaces the bar, not this line.
                 "description": f"Replay of {self.dataset.name}: the cheapest choices that keep the quality bar's "
                                "share of the best predicted quality over the route's requests."}
        return {"version": 1, "default_route": ROUTE, "backends": backends, "routes": [route]}

    def _pricing(self, model: str) -> dict:
        if model in self.token_prices:
            tin, tout = self.token_prices[model]
            return {"input_per_1m": tin, "output_per_1m": tout}
        return {"per_request": self.prices[model]}

    def policy_yaml(self, target: float = 0.95) -> str:
        """:meth:`policy` as the YAML text :meth:`write_policy` writes."""
        return "# generated by `mixroute replay`\n" + yaml.safe_dump(self.policy(target), sort_keys=False)

    def write_policy(self, path: Path, target: float = 0.95) -> Path:
        """Write :meth:`policy` as YAML to ``path``; returns ``path``."""
        path.write_text(self.policy_yaml(target), encoding="utf-8")
        return path
