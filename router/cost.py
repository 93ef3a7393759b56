"""Cost model: USD per call from token counts and per-1M-token prices.

    cost = (tokens_in - tokens_cached) * input_per_1m / 1e6
         + tokens_cached * cached_input_per_1m / 1e6
         + tokens_out * output_per_1m / 1e6
         + per_request

``cached_input_per_1m`` defaults to ``input_per_1m`` (no discount). Hosted backends
without prices in the policy take litellm's bundled price map
(``backends.hosted.pricing.hosted_pricing``).
"""

from __future__ import annotations

from router.policy.models import BackendConfig, Pricing

FREE = Pricing()


def resolve_pricing(config: BackendConfig) -> Pricing:
    """The prices of a backend: the policy's, else litellm's bundled map (hosted), else zero."""
    if config.pricing is not None:
        return config.pricing
    if config.kind == "hosted":
        try:
            from backends.hosted.pricing import hosted_pricing
        except ImportError:  # pragma: no cover - the hosted package is part of the distribution
            return FREE
        return hosted_pricing(config.model) or FREE
    return FREE


def cost_usd(pricing: Pricing, tokens_in: int, tokens_out: int, tokens_cached: int = 0) -> float:
    """Cost of one call in USD (formula in the module docstring).

    Args:
        tokens_in: prompt tokens, including cached ones.
        tokens_out: completion tokens.
        tokens_cached: prompt tokens served from a prefix cache (<= tokens_in).
    """
    cached = max(0, min(tokens_cached, tokens_in))
    cached_price = pricing.cached_input_per_1m if pricing.cached_input_per_1m is not None else pricing.input_per_1m
    return (
        (tokens_in - cached) * pricing.input_per_1m
        + cached * cached_price
        + tokens_out * pricing.output_per_1m
    ) / 1e6 + pricing.per_request
