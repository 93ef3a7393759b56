"""The pricing maths: USD per call from token counts and per-1M-token prices
(:class:`backends.config.Pricing`).

    cost = (tokens_in - tokens_cached - tokens_cache_write) * input_per_1m / 1e6
         + tokens_cached * cached_input_per_1m / 1e6
         + (tokens_cache_write - tokens_cache_write_1h) * cache_write_input_per_1m / 1e6
         + tokens_cache_write_1h * cache_write_1h_input_per_1m / 1e6
         + tokens_out * output_per_1m / 1e6
         + per_request

``tokens_in`` counts every prompt token, those read from and those written to a prefix cache
included (as litellm reports Anthropic's and Bedrock's usage: ``prompt_tokens = input_tokens
+ cache_read_input_tokens + cache_creation_input_tokens``, litellm 1.110.2,
``llms/anthropic/chat/transformation.py`` ``calculate_usage``). ``tokens_cache_write`` counts
every written token and ``tokens_cache_write_1h`` the part of them written to a 1-hour cache
(Anthropic's ``cache_creation_input_tokens`` and its
``cache_creation.ephemeral_1h_input_tokens``; the rest went to the 5-minute cache).
``cached_input_per_1m`` defaults to ``input_per_1m`` (no discount), ``cache_write_input_per_1m``
to ``input_per_1m`` (no surcharge) and ``cache_write_1h_input_per_1m`` to the 5-minute write
price (Anthropic bills a 5-minute cache write at 1.25x the input price and a 1-hour one at 2x,
its prompt caching guide). Hosted backends without prices in the policy take litellm's
bundled price map (:func:`backends.catalog.resolve_pricing`;
``backends.hosted.pricing.hosted_pricing`` gives both write prices for Claude models).

Cache writes are billed, not predicted: the outcome of a hosted answer is priced with the
written tokens the provider reported (``backends.hosted.pricing.billed_cost``), while the
decision engine's expected cost (``router.engine``) prices only the expected cache *reads*
and leaves ``tokens_cache_write`` at 0. Whether a cold prefix is written depends on the
provider (only Claude models take breakpoints), the model's minimum cacheable length and the
client's own breakpoints, none of which the engine knows; charging every cold stable prefix
the surcharge would overprice every provider without one.

Self-hosted pools priced by GPU time (:func:`gpu_pricing`): a pool that costs ``H`` USD
per hour and sustains ``T_out`` output tokens/s (and ``T_in`` prompt tokens/s) under load
costs, per one million tokens,

    output_per_1m = H / 3600 / T_out * 1e6,    input_per_1m = H / 3600 / T_in * 1e6

i.e. each token kind is charged the GPU time it would occupy alone at the measured rate.
When ``T_in`` is not measured it is taken as ``10 x T_out``: an assumption (prefill is
compute-bound and batches far better than decode), to be replaced by a measurement.
"""

from __future__ import annotations

from backends.config import Pricing

FREE = Pricing()


#: Assumed prompt/output throughput ratio of a GPU pool when only output throughput is known.
PREFILL_SPEEDUP = 10.0


def gpu_pricing(pricing: Pricing) -> Pricing:
    """Per-1M-token prices derived from ``gpu_usd_per_hour`` and measured throughput
    (formula in the module docstring); other pricings are returned unchanged."""
    if pricing.gpu_usd_per_hour is None or pricing.output_tokens_per_s is None:
        return pricing
    usd_per_s = pricing.gpu_usd_per_hour / 3600.0
    tin = pricing.input_tokens_per_s or PREFILL_SPEEDUP * pricing.output_tokens_per_s
    return pricing.model_copy(update={"output_per_1m": usd_per_s / pricing.output_tokens_per_s * 1e6,
                                      "input_per_1m": usd_per_s / tin * 1e6})


def sets_base_price(pricing: Pricing | None) -> bool:
    """Whether a policy ``pricing`` block prices a whole call by itself: both
    ``input_per_1m`` and ``output_per_1m``, or ``per_request``, or ``gpu_usd_per_hour`` (zeros
    count: they say free). A block with one token price only, or cache prices only, leaves
    the other tokens at $0 unless a price map fills them in."""
    if pricing is None:
        return False
    given = pricing.model_fields_set
    return {"input_per_1m", "output_per_1m"} <= given or bool({"per_request", "gpu_usd_per_hour"} & given)


def cost_usd(pricing: Pricing, tokens_in: int, tokens_out: int, tokens_cached: int = 0,
             tokens_cache_write: int = 0, tokens_cache_write_1h: int = 0) -> float:
    """Cost of one call in USD (formula in the module docstring).

    Args:
        tokens_in: prompt tokens, including those read from and written to a prefix cache.
        tokens_out: completion tokens.
        tokens_cached: prompt tokens read from a prefix cache (clamped to ``[0, tokens_in]``).
        tokens_cache_write: prompt tokens written to a prefix cache, of any lifetime
            (Anthropic's ``cache_creation_input_tokens``; clamped to
            ``[0, tokens_in - tokens_cached]``).
        tokens_cache_write_1h: the part of ``tokens_cache_write`` written to a 1-hour cache
            (Anthropic's ``ephemeral_1h_input_tokens``; clamped to ``[0, tokens_cache_write]``).
    """
    cached = max(0, min(tokens_cached, tokens_in))
    cached_price = pricing.cached_input_per_1m if pricing.cached_input_per_1m is not None else pricing.input_per_1m
    if tokens_cache_write <= 0:  # the decision path: no write, no write prices to look up
        usd = (tokens_in - cached) * pricing.input_per_1m + cached * cached_price + tokens_out * pricing.output_per_1m
        return usd / 1e6 + pricing.per_request
    written = max(0, min(tokens_cache_write, tokens_in - cached))
    written_1h = max(0, min(tokens_cache_write_1h, written))
    usd = ((tokens_in - cached - written) * pricing.input_per_1m
           + cached * cached_price
           + (written - written_1h) * cache_write_price(pricing)
           + written_1h * cache_write_1h_price(pricing)
           + tokens_out * pricing.output_per_1m)
    return usd / 1e6 + pricing.per_request


def cache_write_price(pricing: Pricing) -> float:
    """USD per 1M prompt tokens written to a (5-minute) prefix cache: ``cache_write_input_per_1m``,
    else ``input_per_1m`` (no surcharge)."""
    write = pricing.cache_write_input_per_1m
    return pricing.input_per_1m if write is None else write


def cache_write_1h_price(pricing: Pricing) -> float:
    """USD per 1M prompt tokens written to a 1-hour prefix cache: ``cache_write_1h_input_per_1m``,
    else the 5-minute write price (:func:`cache_write_price`)."""
    write = pricing.cache_write_1h_input_per_1m
    return cache_write_price(pricing) if write is None else write
