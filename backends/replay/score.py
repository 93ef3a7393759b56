"""Scoring a replay run from the recorded data alone, so every figure can be recomputed.

For each answered prompt: quality = the recorded score of the model that answered it;
cost = that model's recorded cost for the prompt (USD), or its per-call price when the
row records none (:func:`backends.replay.plan.per_call_prices`). The baseline always
sends every prompt to the strongest model (highest mean score over all rows of the data)
and is scored on the same prompts.
"""

from __future__ import annotations

from dataclasses import dataclass

from backends.data import OutcomeRow


@dataclass
class Answered:
    """One replayed request.

    Attributes:
        row: the recorded row whose prompt was sent (first row for a duplicate prompt).
        model: the data model of the backend that answered, ``None`` on failure.
        backend: the ``x-mixroute-backend`` header value.
        gateway_cost_usd: the ``x-mixroute-cost-usd`` header value (USD), if any.
        error: the failure message, if any.
        feedback_error: why rating the answer on the gateway failed (``mixroute replay
            --feedback``), ``None`` when it was rated or not asked to be.
    """

    row: OutcomeRow
    model: str | None
    backend: str | None = None
    gateway_cost_usd: float | None = None
    error: str | None = None
    feedback_error: str | None = None


def call_cost(row: OutcomeRow, model: str, prices: dict[str, float]) -> float:
    """USD cost of ``model`` answering ``row``: recorded, else the per-call price."""
    cost = row.costs.get(model)
    return prices[model] if cost is None else cost


def summarize(answered: list[Answered], baseline: str, prices: dict[str, float]) -> dict:
    """The replay report.

    Args:
        answered: one entry per request sent.
        baseline: the strongest model of the data.
        prices: model -> USD per call for rows without a recorded cost.

    Returns:
        ``{"n", "quality", "cost_usd", "baseline": {"model", "quality", "cost_usd"},
        "backend_share": {model: fraction}, "errors", "gateway_cost_usd"}``: ``n`` counts
        answered requests; quality is a mean in [0, 1]; costs are USD totals over the ``n``
        prompts; ``gateway_cost_usd`` sums the gateway's cost headers (``None`` if absent).
    """
    ok = [a for a in answered if a.model is not None]
    n = len(ok)
    share: dict[str, float] = {}
    for a in ok:
        share[a.model] = share.get(a.model, 0) + 1
    headers = [a.gateway_cost_usd for a in ok if a.gateway_cost_usd is not None]
    return {
        "n": n,
        "quality": sum(a.row.scores[a.model] for a in ok) / n if n else 0.0,
        "cost_usd": sum(call_cost(a.row, a.model, prices) for a in ok),
        "baseline": {
            "model": baseline,
            "quality": sum(a.row.scores[baseline] for a in ok) / n if n else 0.0,
            "cost_usd": sum(call_cost(a.row, baseline, prices) for a in ok),
        },
        "backend_share": {m: c / n for m, c in sorted(share.items(), key=lambda kv: -kv[1])},
        "errors": len(answered) - n,
        "gateway_cost_usd": sum(headers) if headers else None,
    }
