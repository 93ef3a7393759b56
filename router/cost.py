"""Cost model: USD per call from token counts and per-1M-token prices.

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
bundled price map (``backends.hosted.pricing.hosted_pricing``, which gives both write prices
for Claude models).

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

import math
from typing import TYPE_CHECKING

from router.policy.models import BackendConfig, Pricing

if TYPE_CHECKING:
    from router.decision import Candidate

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


def resolve_pricing(config: BackendConfig) -> Pricing:
    """The prices of a backend: :func:`known_pricing`, else zero."""
    return known_pricing(config) or FREE


def sets_base_price(pricing: Pricing | None) -> bool:
    """Whether a policy ``pricing`` block prices a whole call by itself: both
    ``input_per_1m`` and ``output_per_1m``, or ``per_request``, or ``gpu_usd_per_hour`` (zeros
    count: they say free). A block with one token price only, or cache prices only, leaves
    the other tokens at $0 unless a price map fills them in."""
    if pricing is None:
        return False
    given = pricing.model_fields_set
    return {"input_per_1m", "output_per_1m"} <= given or bool({"per_request", "gpu_usd_per_hour"} & given)


def known_pricing(config: BackendConfig) -> Pricing | None:
    """The prices of a backend, or ``None`` when nothing prices it (policy validation refuses
    such a hosted backend, :mod:`router.policy.hosted_checks`).

    A hosted model takes litellm's bundled map, and the fields its policy ``pricing`` sets
    replace the map's one by one (``{cache_write_input_per_1m: 3.75}`` alone keeps the map's
    input, output and 1-hour write prices); GPU-time pricing replaces the map whole. A model the map does
    not price, and every other kind, takes the policy's prices as they are (GPU-time pricing
    derived, :func:`gpu_pricing`); ``None`` for a hosted model that the map does not price
    and whose block does not price a whole call (:func:`sets_base_price`).
    """
    own = config.pricing
    if config.kind == "hosted" and (own is None or own.gpu_usd_per_hour is None):
        try:
            from backends.hosted.pricing import hosted_pricing
        except ImportError:  # pragma: no cover - the hosted package is part of the distribution
            mapped = None
        else:
            mapped = hosted_pricing(config.model)
        if mapped is not None:
            return mapped if own is None else mapped.model_copy(
                update={f: getattr(own, f) for f in own.model_fields_set})
        if not sets_base_price(own):
            return None
    return None if own is None else gpu_pricing(own)


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


def prompt_ceiling_usd(pricing: Pricing, tokens_in: int) -> float:
    """The most a prompt of ``tokens_in`` tokens can cost (USD) before any output: every
    token at the dearer of the input and the (5-minute) cache-write price, no cache read
    assumed, plus ``per_request``. A 1-hour cache write (only where the client marks its own
    breakpoint ``"ttl": "1h"``) can cost more."""
    return max(0, tokens_in) * max(pricing.input_per_1m, cache_write_price(pricing)) / 1e6 + pricing.per_request


def output_tokens_within(pricing: Pricing, tokens_in: int, limit_usd: float, completions: int = 1) -> int | None:
    """Output tokens per completion that a call may generate without costing more than
    ``limit_usd`` (a rule's ``max_cost_mode: hard``):

        floor((limit_usd - prompt_ceiling_usd) / (completions x output_per_1m / 1e6))

    Args:
        tokens_in: prompt tokens (the engine's estimate).
        completions: completions billed (``n``; prompts x ``best_of`` for legacy completions).

    Returns:
        The token limit (0: not even one output token fits, or the prompt alone costs more
        than ``limit_usd``); ``None`` when output is free (or so cheap that the limit buys
        more tokens than a float counts) and the prompt fits: no limit needed.
    """
    room = limit_usd - prompt_ceiling_usd(pricing, tokens_in)
    if room < 0:
        return 0
    tokens = room * 1e6 / (max(1, completions) * pricing.output_per_1m) if pricing.output_per_1m > 0 else math.inf
    if not math.isfinite(tokens):
        return None
    return max(0, math.floor(tokens + 1e-9))


#: Output tokens per completion at or above which a hard cost limit's output-token limit is
#: not sent (no model generates that much in one completion; a larger integer could
#: overflow a provider's 32- or 64-bit field): the limit does not bind there.
UNBOUNDED_OUTPUT = 1_000_000


def within_hard_limit(cands: list[Candidate], pricing: dict[str, Pricing], context: dict[str, int | None],
                      tokens_in: int, completions: int, asked: int | None, limit_usd: float) -> list[Candidate]:
    """The candidates that can answer within a hard cost limit (a rule's ``max_cost_mode:
    hard``), each with the output-token limit that keeps it there
    (:func:`output_tokens_within`). Where that limit binds (below the client's ``asked``
    limit, or there is none; below what the backend's known ``context`` window leaves after
    the prompt; under :data:`UNBOUNDED_OUTPUT` tokens) it becomes the candidate's
    :attr:`~router.decision.Candidate.output_token_cap`, and its expected output, expected
    cost and cost ceiling are those of the capped call. A candidate that cannot produce one
    token within the limit is left out, with a note. Modifies the candidates.

    Args:
        pricing, context: per backend name, its prices and context window (tokens; ``None``:
            unknown).
        tokens_in: the prompt's estimated tokens; completions: completions billed.
        asked: the request's output-token limit per completion, ``None`` without one.
        limit_usd: the limit (USD).
    """
    kept = []
    for c in cands:
        prices = pricing[c.backend]
        room = output_tokens_within(prices, tokens_in, limit_usd, completions)
        if room is not None and room < 1:
            c.note = (f"over the hard cost limit of {limit_usd} USD with its prompt "
                      f"(~{tokens_in} tokens){' and one output token' if prices.output_per_1m else ''}")
            continue
        window = context.get(c.backend)
        binds = room is not None and room < UNBOUNDED_OUTPUT and (window is None or room < window - tokens_in)
        if binds and (asked is None or room < asked):
            c.output_token_cap = room
            c.expected_output_tokens = min(c.expected_output_tokens, room * completions)
            c.expected_cost_usd = cost_usd(prices, tokens_in, c.expected_output_tokens, c.expected_cached_tokens)
            c.output_tokens_ceiling = room * completions
            c.cost_ceiling_usd = cost_usd(prices, tokens_in, room * completions, c.expected_cached_tokens)
        kept.append(c)
    return kept


def resolve_context(config: BackendConfig) -> int | None:
    """A backend's context window in tokens: the policy's ``context_tokens``, else
    litellm's bundled ``max_input_tokens`` for hosted models, else ``None`` (unchecked)."""
    if config.context_tokens is not None:
        return config.context_tokens
    if config.kind != "hosted":
        return None
    try:
        from backends.hosted.pricing import hosted_context
    except ImportError:  # pragma: no cover
        return None
    return hosted_context(config.model)
