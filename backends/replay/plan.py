"""The policy ``mixroute replay`` serves: one ``replay`` backend per model of the data,
and an ``auto`` route over all of them.

Per backend: ``name`` = :func:`backend_name` of the model, ``quality`` = the model's mean
recorded score over all rows of the data (the prior the baseline predictor routes on),
and ``pricing.per_request`` = the model's per-call price from :func:`per_call_prices`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from backends.openai_shapes import estimate_tokens
from router.data import Dataset

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
#: Pattern of policy names (:data:`router.policy.models.NAME_PATTERN`).
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
    """

    dataset: Dataset
    data: list[Path]
    names: dict[str, str]
    prices: dict[str, float]
    price_source: str

    @classmethod
    def build(cls, dataset: Dataset, data: list[Path]) -> "ReplayPlan":
        names: dict[str, str] = {}
        for m in dataset.models:
            names[backend_name(m, set(names))] = m
        prices, source = per_call_prices(dataset)
        return cls(dataset, [Path(p).resolve() for p in data], names, prices, source)

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
            "pricing": {"per_request": self.prices[model]},
        } for name, model in self.names.items()]
        route = {"name": ROUTE, "backends": list(self.names), "quality_bar": {"route_target": target},
                 # No figure here: `mixroute calibrate --write` replaces the bar, not this line.
                 "description": f"Replay of {self.dataset.name}: the cheapest choices that keep the quality bar's "
                                "share of the best predicted quality over the route's requests."}
        return {"version": 1, "default_route": ROUTE, "backends": backends, "routes": [route]}

    def policy_yaml(self, target: float = 0.95) -> str:
        """:meth:`policy` as the YAML text :meth:`write_policy` writes."""
        return "# generated by `mixroute replay`\n" + yaml.safe_dump(self.policy(target), sort_keys=False)

    def write_policy(self, path: Path, target: float = 0.95) -> Path:
        """Write :meth:`policy` as YAML to ``path``; returns ``path``."""
        path.write_text(self.policy_yaml(target), encoding="utf-8")
        return path
