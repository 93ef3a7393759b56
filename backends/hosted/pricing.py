"""Prices of hosted models from litellm's bundled price map (``litellm.model_cost``), and
the billed cost of a hosted answer whose provider wrote a prompt-cache prefix.

The map gives USD per token (``input_cost_per_token``, ``output_cost_per_token``,
``cache_read_input_token_cost``, ``cache_creation_input_token_cost`` for a 5-minute cache write,
``cache_creation_input_token_cost_above_1hr`` for a 1-hour one);
:class:`backends.config.Pricing` wants USD per 1M tokens. The bundled copy is used
(``LITELLM_LOCAL_MODEL_COST_MAP=True``), never a download, so prices are those of the
installed litellm release.

Cache writes (:func:`billed_cost`): litellm reports Anthropic's (and Bedrock's)
``cache_creation_input_tokens`` as ``usage.prompt_tokens_details.cache_write_tokens`` (mirrored
in ``cache_creation_tokens``) and as a top-level ``usage.cache_creation_input_tokens``, and
counts them in ``prompt_tokens`` (litellm 1.110.2, ``llms/anthropic/chat/transformation.py``
``calculate_usage``; ``types/utils.py`` ``Usage``). Anthropic's split by lifetime
(``usage.cache_creation.ephemeral_5m_input_tokens`` / ``ephemeral_1h_input_tokens``) becomes
``usage.prompt_tokens_details.cache_creation_token_details`` (``CacheCreationTokenDetails``,
same field names; ``None`` when Anthropic sent no split, and then litellm's own cost
calculator bills every write at the 5-minute price, ``litellm_core_utils/llm_cost_calc/utils.py``
``calculate_cache_writing_cost``; so does :func:`billed_cost`). The hosted backend cuts its answers to
OpenAI's keys, which have no cache-write count, so the cost is computed from litellm's usage
before that cut and is reported as the call's cost (``backends.call.CallReport.cost_usd``).
"""

from __future__ import annotations

from typing import Any

from backends.config import Pricing
from backends.hosted.sdk import load_litellm
from backends.pricing import cache_write_1h_price, cache_write_price, cost_usd

PER_1M = 1_000_000


def hosted_pricing(model: str) -> Pricing | None:
    """Pricing of ``model`` (litellm name, with or without its ``provider/`` prefix).

    Args:
        model: e.g. ``openai/gpt-4o-mini`` or ``gpt-4o-mini``.

    Returns:
        USD per 1M input / output / cached-input / cache-write (5-minute and 1-hour) tokens,
        or ``None`` when the map has no token prices for the model. ``cached_input_per_1m``
        is ``None`` (no discount) when the map has no cache-read price,
        ``cache_write_input_per_1m`` ``None`` (no surcharge) when it has no cache-creation
        price, ``cache_write_1h_input_per_1m`` ``None`` (the 5-minute price) when it has no
        ``cache_creation_input_token_cost_above_1hr``.
    """
    entry = _entry(load_litellm().model_cost, model)
    if entry is None:
        return None
    inp, out = entry.get("input_cost_per_token"), entry.get("output_cost_per_token")
    if inp is None or out is None:
        return None
    cached = entry.get("cache_read_input_token_cost")
    # The gateway's own breakpoints are 5-minute ones (backends.hosted.cache_hints); a
    # client's may ask for the 1-hour cache ("ttl": "1h").
    write = entry.get("cache_creation_input_token_cost")
    write_1h = entry.get("cache_creation_input_token_cost_above_1hr")
    return Pricing(
        input_per_1m=_per_1m(inp),
        output_per_1m=_per_1m(out),
        cached_input_per_1m=None if cached is None else _per_1m(cached),
        cache_write_input_per_1m=None if write is None else _per_1m(write),
        cache_write_1h_input_per_1m=None if write_1h is None else _per_1m(write_1h),
    )


def billed_cost(pricing: Pricing, usage: Any) -> float | None:
    """USD cost of a hosted answer whose provider wrote prompt tokens to its cache.

    Args:
        pricing: the backend's prices (:func:`backends.catalog.resolve_pricing`).
        usage: litellm's usage (its ``Usage`` object or that object's ``model_dump()``)
            before the cut to OpenAI's keys.

    Returns:
        :func:`backends.pricing.cost_usd` of the usage, cache writes (:func:`cache_write_tokens`)
        billed at ``cache_write_input_per_1m`` and those to the 1-hour cache
        (:func:`cache_write_1h_tokens`) at ``cache_write_1h_input_per_1m``; ``None`` when
        nothing was written or the writes cost what other prompt tokens cost, so that the
        OpenAI usage the gateway keeps prices the answer exactly.
    """
    written, written_1h = cache_write_tokens(usage), cache_write_1h_tokens(usage)
    surcharged = ((written > written_1h and cache_write_price(pricing) != pricing.input_per_1m)
                  or (written_1h > 0 and cache_write_1h_price(pricing) != pricing.input_per_1m))
    if not written or not surcharged:
        return None
    details = _get(usage, "prompt_tokens_details")
    return cost_usd(pricing, _int(_get(usage, "prompt_tokens")), _int(_get(usage, "completion_tokens")),
                    _int(_get(details, "cached_tokens")), written, written_1h)


def cache_write_tokens(usage: Any) -> int:
    """Prompt tokens written to the provider's prompt cache, from litellm's usage (see the
    module docstring): :func:`_reported_writes`, 0 when none is given."""
    return _int(_reported_writes(usage))


def cache_write_counts(usage: Any) -> dict[str, int] | None:
    """The cache writes of litellm's usage as the gateway records them
    (:meth:`backends.call.CallReport.cache_write`): ``{"tokens": cache_write_tokens(usage), "tokens_1h":
    cache_write_1h_tokens(usage)}`` (tokens), or ``None`` when the usage carries no cache-write
    count at all (providers that do not report writes, such as OpenAI, as against Anthropic's
    count of 0)."""
    if _reported_writes(usage) is None:
        return None
    return {"tokens": cache_write_tokens(usage), "tokens_1h": cache_write_1h_tokens(usage)}


def _reported_writes(usage: Any) -> Any:
    """The cache-write count as litellm reports it, or ``None``: ``prompt_tokens_details
    .cache_write_tokens``, else its ``cache_creation_tokens``, else ``cache_creation_input_tokens``."""
    details = _get(usage, "prompt_tokens_details")
    for value in (_get(details, "cache_write_tokens"), _get(details, "cache_creation_tokens"),
                  _get(usage, "cache_creation_input_tokens")):
        if value is not None:
            return value
    return None


def cache_write_1h_tokens(usage: Any) -> int:
    """The part of :func:`cache_write_tokens` written to a 1-hour cache, from litellm's usage
    (see the module docstring): ``prompt_tokens_details.cache_creation_token_details
    .ephemeral_1h_input_tokens``; 0 when litellm carries no split (every write is then a
    5-minute one)."""
    split = _get(_get(usage, "prompt_tokens_details"), "cache_creation_token_details")
    return _int(_get(split, "ephemeral_1h_input_tokens"))


def _get(obj: Any, key: str) -> Any:
    if obj is None:
        return None
    return obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)


def _int(value: Any) -> int:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else 0


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


def hosted_mode(model: str) -> str | None:
    """What litellm's bundled map says the model serves (its ``mode``: ``chat``,
    ``completion``, ``embedding``, ``rerank``...), or ``None`` when the map does not know it."""
    entry = _entry(load_litellm().model_cost, model)
    mode = entry.get("mode") if entry is not None else None
    return mode if isinstance(mode, str) else None
