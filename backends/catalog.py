"""What is known of a backend beyond the numbers of its policy entry: its prices and its
context window, from the policy where it gives them, else from litellm's bundled map for
hosted models (:mod:`backends.hosted.pricing`), else zero prices and an unchecked window.
"""

from __future__ import annotations

from backends.config import BackendConfig, Pricing
from backends.hosted.pricing import hosted_context, hosted_pricing
from backends.pricing import FREE, gpu_pricing, sets_base_price


def resolve_pricing(config: BackendConfig) -> Pricing:
    """The prices of a backend: :func:`known_pricing`, else zero."""
    return known_pricing(config) or FREE


def known_pricing(config: BackendConfig) -> Pricing | None:
    """The prices of a backend, or ``None`` when nothing prices it (policy validation refuses
    such a hosted backend, :mod:`router.policy.hosted_checks`).

    A hosted model takes litellm's bundled map, and the fields its policy ``pricing`` sets
    replace the map's one by one (``{cache_write_input_per_1m: 3.75}`` alone keeps the map's
    input, output and 1-hour write prices); GPU-time pricing replaces the map whole. A model
    the map does not price, and every other kind, takes the policy's prices as they are (GPU-time pricing
    derived, :func:`gpu_pricing`); ``None`` for a hosted model that the map does not price
    and whose block does not price a whole call (:func:`sets_base_price`).
    """
    own = config.pricing
    if config.kind == "hosted" and (own is None or own.gpu_usd_per_hour is None):
        mapped = hosted_pricing(config.model)
        if mapped is not None:
            return mapped if own is None else mapped.model_copy(
                update={f: getattr(own, f) for f in own.model_fields_set})
        if not sets_base_price(own):
            return None
    return None if own is None else gpu_pricing(own)


def resolve_context(config: BackendConfig) -> int | None:
    """A backend's context window in tokens: the policy's ``context_tokens``, else
    litellm's bundled ``max_input_tokens`` for hosted models, else ``None`` (unchecked)."""
    if config.context_tokens is not None:
        return config.context_tokens
    if config.kind != "hosted":
        return None
    return hosted_context(config.model)
