"""Checks of hosted backends that need litellm, run by policy validation
(:func:`router.policy.loader.parse_policy`), so that a policy that validates also starts and
prices its backends.

- A model litellm cannot place with a provider (``gpt5``, ``claude-sonnet`` without
  ``anthropic/``): every call to it failed, answered to the client as its own 400
  ``invalid_request_error``, and a route never fell back from it.
- A model without ``pricing`` that litellm's bundled price map does not price: it was priced
  at zero, silently, and so chosen for every request as the cheapest candidate.
- A model the map lists as an embedding model on a chat backend, or the reverse
  (:mod:`router.policy.tasks`): every call would fail upstream.
"""

from __future__ import annotations

from backends.catalog import known_pricing
from backends.hosted.pricing import hosted_mode
from backends.hosted.sdk import load_litellm
from router.policy.models import Policy

Problem = tuple[tuple, str]
"""``(location in the policy, e.g. ("backends", 0, "model"), message)``."""


def hosted_problems(policy: Policy) -> list[Problem]:
    """The problems of ``policy``'s hosted backends (imports litellm when it has one)."""
    hosted = [(i, b) for i, b in enumerate(policy.backends) if b.kind == "hosted"]
    if not hosted:
        return []
    litellm = load_litellm()
    problems: list[Problem] = []
    for i, b in hosted:
        loc = ("backends", i, "model")
        provider = b.options.get("custom_llm_provider")
        try:
            litellm.get_llm_provider(b.model, custom_llm_provider=provider if isinstance(provider, str) else None,
                                     api_base=b.api_base)
        except Exception:  # noqa: BLE001  # litellm raises its BadRequestError (or others) for "no provider"
            problems.append((loc, f"litellm knows no provider for model '{b.model}': write it as "
                                  "provider/model, e.g. openai/gpt-4o-mini or anthropic/claude-3-5-haiku-latest"))
            continue
        mode = hosted_mode(b.model)
        if mode is not None and (mode == "embedding") != (b.task == "embedding"):
            problems.append((("backends", i, "task"),
                             f"litellm lists '{b.model}' as {'an' if mode[0] in 'aeiou' else 'a'} {mode} model, but the backend says task: {b.task}"
                             f"{'' if b.task == 'embedding' else ' (the default)'}: set task: "
                             f"{'embedding' if mode == 'embedding' else 'chat'}"))
        if known_pricing(b) is None:
            problems.append((loc, f"litellm's bundled price map has no price for '{b.model}': give the backend "
                                  "pricing: {input_per_1m: X, output_per_1m: Y} (USD per 1M tokens, both; 0 and 0 "
                                  "if it is free), or what is unpriced would count as free and it would win every "
                                  "route as the cheapest"))
    return problems
