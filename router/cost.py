"""Cost limits of the decision: how many output tokens a call may generate within a hard
cost limit (a rule's ``max_cost_mode: hard``). The pricing maths they stand on (USD per
call from tokens and prices) is :mod:`backends.pricing`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from backends.config import Pricing
from backends.pricing import cache_write_price, cost_usd

if TYPE_CHECKING:
    from router.decision import Candidate


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
