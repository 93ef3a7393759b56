"""Prices of hosted models from litellm's bundled price map (``litellm.model_cost``).

The map gives USD per token (``input_cost_per_token``, ``output_cost_per_token``,
``cache_read_input_token_cost``); :class:`router.policy.models.Pricing` wants USD per 1M
tokens. The bundled copy is used (``LITELLM_LOCAL_MODEL_COST_MAP=True``), never a download,
so prices are those of the installed litellm release.
"""

from __future__ import annotations

from backends.hosted.backend import load_litellm
from router.policy.models import Pricing

PER_1M = 1_000_000


def hosted_pricing(model: str) -> Pricing | None:
    """Pricing of ``model`` (litellm name, with or without its ``provider/`` prefix).

    Args:
        model: e.g. ``openai/gpt-4o-mini`` or ``gpt-4o-mini``.

    Returns:
        USD per 1M input / output / cached-input tokens, or ``None`` when the map has no
        token prices for the model. ``cached_input_per_1m`` is ``None`` (no discount) when
        the map has no cache-read price.
    """
    entry = _entry(load_litellm().model_cost, model)
    if entry is None:
        return None
    inp, out = entry.get("input_cost_per_token"), entry.get("output_cost_per_token")
    if inp is None or out is None:
        return None
    cached = entry.get("cache_read_input_token_cost")
    return Pricing(
        input_per_1m=_per_1m(inp),
        output_per_1m=_per_1m(out),
        cached_input_per_1m=None if cached is None else _per_1m(cached),
    )


def _entry(cost_map: dict, model: str) -> dict | None:
    """The map entry for ``model``: exact name first, then without the provider prefix."""
    for name in (model, model.split("/", 1)[1] if "/" in model else None):
        if name and isinstance(cost_map.get(name), dict):
            return cost_map[name]
    return None


def _per_1m(per_token: float) -> float:
    # round away float noise of per-token figures (2.5e-06 * 1e6 = 2.4999999999999996)
    return round(float(per_token) * PER_1M, 9)


def hosted_context(model: str) -> int | None:
    """The model's context window in tokens from litellm's bundled map (``max_input_tokens``,
    else ``max_tokens``), or ``None`` when the map does not know it."""
    entry = _entry(load_litellm().model_cost, model)
    if entry is None:
        return None
    window = entry.get("max_input_tokens") or entry.get("max_tokens")
    return int(window) if isinstance(window, (int, float)) and window > 0 else None
