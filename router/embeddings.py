"""Decisions for ``POST /v1/embeddings``: the cheapest embedding backend answers.

An embeddings request is not classified (no encoder pass: there is no answer whose quality
to predict, and the route's backends are meant to give interchangeable vectors) and not
rewritten. Each candidate's expected cost is its input price times the request's input tokens
(:func:`backends.openai_shapes.embedding_tokens`: token ids counted, text estimated); the
cheapest is chosen (ties: policy order), the others are the fallbacks by cost, tried on a
retryable failure as for chat (:mod:`gateway.dispatch`), up to the route's ``max_attempts``.

The policy's rules hold as for chat, read without signals (``when_signal`` rules never hold):
``block`` refuses; ``allow_backends`` and ``require_tags`` filter (a pinned backend they
exclude is refused); ``max_cost_usd`` drops candidates whose expected cost is over it, in
either ``max_cost_mode`` (an embedding has no output to cap); a ``route_to`` of an embedding
backend replaces the candidates, while one of a chat backend (a rule written for chat routes)
does not apply.
"""

from __future__ import annotations

from backends.config import BackendConfig, Pricing
from backends.openai_shapes import embedding_inputs, embedding_tokens
from backends.pricing import cost_usd
from router.decision import Candidate, Decision, RoutingRequest
from router.errors import BackendNotAllowed, NoAllowedCandidate
from router.policy.loader import LoadedPolicy
from router.policy.models import Policy, RouteConfig
from router.records import DecisionRecord
from router.rules import PromptBlocked, matching


def input_tokens(body: dict) -> int:
    """Input tokens of an embeddings request body (token ids counted, text estimated)."""
    return sum(embedding_tokens(i) for i in embedding_inputs(body))


def decide_embedding(loaded: LoadedPolicy, pricing: dict[str, Pricing], req: RoutingRequest,
                     route: RouteConfig | None, pinned: BackendConfig | None) -> Decision:
    """The decision for an embeddings request to ``route`` or the ``pinned`` backend.

    Raises:
        router.rules.PromptBlocked, router.errors.BackendNotAllowed,
        router.errors.NoAllowedCandidate: refused by the rules; each carries ``record``, the
            refusal's :class:`DecisionRecord` (as the engine's refusals, ``REFUSALS``).
    """
    policy = loaded.policy
    name = route.name if route is not None else pinned.name
    tokens = input_tokens(req.body)
    try:
        backends, limit, notes = _ruled(policy, route, pinned, req)
        cands = [Candidate(backend=b.name, model=b.model, predicted_quality=b.quality,
                           expected_cost_usd=cost_usd(pricing[b.name], tokens, 0), expected_output_tokens=0,
                           eligible=True) for b in backends]
        for c in cands:
            if limit is not None and c.expected_cost_usd > limit:
                c.note = f"expected cost {c.expected_cost_usd:.6g} USD over the limit of {limit} USD"
        kept = [c for c in cands if not c.note]
        if not kept:
            where = f"backend '{name}'" if pinned is not None else f"no backend of route '{name}'"
            exc = (BackendNotAllowed(f"{where} would cost more than the policy's limit of {limit} USD", param="model")
                   if pinned is not None else NoAllowedCandidate(f"{where} is within the cost limits "
                                                                 f"({'; '.join(notes)})"))
            exc.candidates = cands
            raise exc
    except (PromptBlocked, BackendNotAllowed, NoAllowedCandidate) as exc:
        exc.record = DecisionRecord(
            request_id=req.request_id, route=name, policy_hash=loaded.hash, chosen="", reason=exc.code,
            candidates=[vars(c).copy() for c in getattr(exc, "candidates", [])],
            signals={"refused": exc.message}, tenant=req.tenant, endpoint=req.endpoint, pinned=pinned is not None)
        raise
    order = sorted(kept, key=lambda c: c.expected_cost_usd)  # stable: ties keep the policy order
    attempts = route.max_attempts if route is not None else 1
    record = DecisionRecord(
        request_id=req.request_id, route=name, policy_hash=loaded.hash, chosen=order[0].backend,
        reason="pinned" if pinned is not None else "cheapest", candidates=[vars(c).copy() for c in cands],
        fallbacks=[c.backend for c in order[1:attempts]], signals={"rules": notes, "input_tokens": tokens},
        tenant=req.tenant, endpoint=req.endpoint, pinned=pinned is not None)
    return Decision(record=record, body=req.body, candidates=order, reserve=[c.backend for c in order[attempts:]])


def _ruled(policy: Policy, route: RouteConfig | None, pinned: BackendConfig | None,
           req: RoutingRequest) -> tuple[list[BackendConfig], float | None, list[str]]:
    """The candidates the rules leave (see the module docstring), the lowest cost limit
    (USD, ``None``: none) and one note per rule applied."""
    backends = [pinned] if pinned is not None else [policy.backend(n) for n in route.backends]
    limit: float | None = None
    notes: list[str] = []
    rules = list(matching(policy, route, req.tenant, req.headers, {}, pinned=pinned))
    for rule in rules:
        if rule.block:
            raise PromptBlocked(f"The request was blocked by the policy rule '{rule.name}'")
    target = next((policy.backend(r.route_to) for r in rules if r.route_to
                   and policy.backend(r.route_to).task == "embedding"), None)
    if target is not None and pinned is None:
        backends = [target]
        notes.append(f"route to {target.name}")
    for rule in rules:
        kept = [b for b in backends if (not rule.allow_backends or b.name in rule.allow_backends)
                and set(rule.require_tags) <= set(b.tags)
                and (pinned is None or not rule.route_to or policy.backend(rule.route_to).task != "embedding"
                     or rule.route_to == pinned.name)]
        if pinned is not None and not kept:
            raise BackendNotAllowed(f"The policy rule '{rule.name}' does not allow backend '{pinned.name}' for this "
                                    "request", param="model")
        if len(kept) < len(backends):
            notes.append(f"{rule.name}: allow {[b.name for b in kept]}")
        backends = kept
        if rule.max_cost_usd is not None:
            limit = rule.max_cost_usd if limit is None else min(limit, rule.max_cost_usd)
            notes.append(f"{rule.name}: max cost {rule.max_cost_usd} USD")
    if not backends:
        raise NoAllowedCandidate(f"No backend of route '{route.name}' is allowed for this request "
                                 f"({'; '.join(notes)})")
    return backends, limit, notes
