"""The decision engine: Policy x Prediction -> Decision.

For a route with candidates C and quality bar q:

1. Rules drop candidates (``require_tags``, ``max_cost_usd``).
2. Each candidate gets predicted quality (:mod:`router.predict`) and expected cost
   (:mod:`router.cost`) with ``input tokens`` estimated from the prompt and ``output
   tokens`` = min(predicted completion tokens, ``max_tokens`` when the client set it).
3. The bar: ``min_quality`` (absolute) or ``target x max(predicted quality)`` (relative).
4. The choice is the cheapest candidate whose predicted quality clears the bar (ties:
   higher quality, then policy order). If none clears it, ``on_no_candidate`` decides.
5. Fallbacks: the other candidates, bar-clearing ones by cost first, then the rest by
   predicted quality, truncated to ``max_attempts - 1``.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from backends.openai_shapes import estimate_tokens, prompt_text
from router.cost import cost_usd, resolve_pricing
from router.errors import NoCandidate
from router.policy.loader import LoadedPolicy
from router.policy.models import BackendConfig, Pricing, RouteConfig
from router.predict import Predictor, PriorPredictor
from router.records import DecisionRecord
from router.rewrite import CACHE_SCOPE_KEY, RewriteOptions, rewrite

_EPS = 1e-9


@dataclass
class Candidate:
    """One candidate's scores. Costs in USD, tokens in tokens."""

    backend: str
    model: str
    predicted_quality: float | None
    expected_cost_usd: float
    expected_output_tokens: int
    eligible: bool = False
    note: str = ""


@dataclass
class Decision:
    """A routing decision; ``record`` is what the store keeps."""

    record: DecisionRecord
    body: dict
    candidates: list[Candidate] = field(default_factory=list)
    bar: float | None = None

    @property
    def order(self) -> list[str]:
        """Backends to try, in order: the choice then the fallbacks."""
        return [self.record.chosen, *self.record.fallbacks]


@dataclass
class RoutingRequest:
    """What the engine needs from an HTTP request.

    Attributes:
        endpoint: ``chat`` or ``completions``.
        body: the validated OpenAI request body (``model`` = route or backend name).
        tenant: tenant name when authenticated.
        headers: lower-cased request headers that rules may match (``x-mixroute-*``).
    """

    endpoint: str
    body: dict
    tenant: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    request_id: str = field(default_factory=lambda: f"mr-{uuid.uuid4().hex}")


class Router:
    """Routes requests under one loaded policy.

    Args:
        loaded: the validated policy.
        predictor: quality/length predictor; the prior baseline when ``None``.
    """

    def __init__(self, loaded: LoadedPolicy, predictor: Predictor | None = None):
        self.loaded = loaded
        self.policy = loaded.policy
        self.predictor: Predictor = predictor or PriorPredictor()
        self.pricing: dict[str, Pricing] = {b.name: resolve_pricing(b) for b in self.policy.backends}

    def target(self, model: str) -> tuple[RouteConfig | None, BackendConfig | None]:
        """Resolve a request's ``model`` to a route or a pinned backend (both ``None``: unknown)."""
        route = self.policy.route(model)
        return (route, None) if route else (None, self.policy.backend(model))

    async def decide(self, req: RoutingRequest) -> Decision:
        """Decide where ``req`` goes.

        Raises:
            router.errors.UnknownModel: ``model`` names neither a route nor a backend.
            router.errors.NoCandidate: rules left no candidate, or ``on_no_candidate: reject``.
        """
        from router.errors import UnknownModel

        model = req.body.get("model") or self.policy.default_route
        route, pinned = self.target(model)
        if route is None and pinned is None:
            known = [r.name for r in self.policy.routes] + [b.name for b in self.policy.backends]
            raise UnknownModel(f"The model '{model}' does not exist (routes and backends: {', '.join(known)})",
                               param="model")
        rewritten = rewrite(req.body, RewriteOptions(enabled=route.rewrite if route else True,
                                                     volatile_patterns=tuple(self.policy.rewrite.volatile_patterns)))
        body, phash = rewritten
        text = prompt_text(req.endpoint, body)
        body = {**body, CACHE_SCOPE_KEY: {"tenant": req.tenant, "prefix_hash": phash}}
        if pinned is not None:
            decision = await self._pinned(req, body, phash, text, pinned)
            decision.record.signals["rewrite"] = rewritten.signals()
            return decision
        backends = [self.policy.backend(n) for n in route.backends]
        backends, rule_notes = self._apply_rules(route, req, backends)
        if not backends:
            raise NoCandidate(f"No backend of route '{route.name}' is allowed for this request ({'; '.join(rule_notes)})")
        prediction = await self.predictor.predict(text, backends)
        cands = self._score(req, text, backends, prediction.quality, prediction.output_tokens)
        cands, rule_notes2 = self._cost_rules(route, req, cands)
        rule_notes += rule_notes2
        if not cands:
            raise NoCandidate(f"No backend of route '{route.name}' is within the cost limits ({'; '.join(rule_notes)})")
        bar = self._bar(route, cands)
        for c in cands:
            c.eligible = c.predicted_quality + _EPS >= bar
        chosen, reason = self._choose(route, cands)
        rest = [c for c in cands if c is not chosen]
        rest.sort(key=lambda c: (not c.eligible, c.expected_cost_usd if c.eligible else -c.predicted_quality))
        record = DecisionRecord(
            request_id=req.request_id, route=route.name, policy_hash=self.loaded.hash, chosen=chosen.backend,
            reason=reason, candidates=[vars(c).copy() for c in cands],
            fallbacks=[c.backend for c in rest][: route.max_attempts - 1],
            signals={**prediction.signals, "predictor": prediction.source, "bar": bar, "rules": rule_notes,
                     "rewrite": rewritten.signals()},
            tenant=req.tenant, endpoint=req.endpoint, prefix_hash=phash,
        )
        return Decision(record=record, body=body, candidates=cands, bar=bar)

    async def _pinned(self, req: RoutingRequest, body: dict, phash: str, text: str, b: BackendConfig) -> Decision:
        cands = self._score(req, text, [b], {}, None)
        cands[0].predicted_quality = b.quality  # no prediction is made for a pinned request
        cands[0].eligible = True
        record = DecisionRecord(
            request_id=req.request_id, route=b.name, policy_hash=self.loaded.hash, chosen=b.name, reason="pinned",
            candidates=[vars(cands[0]).copy()], tenant=req.tenant, endpoint=req.endpoint, pinned=True,
            prefix_hash=phash,
        )
        return Decision(record=record, body=body, candidates=cands)

    def _score(self, req: RoutingRequest, text: str, backends: Sequence[BackendConfig],
               quality: dict[str, float], output_tokens: int | None) -> list[Candidate]:
        from router.predict import DEFAULT_OUTPUT_TOKENS

        tokens_in = estimate_tokens(text)
        out = output_tokens or DEFAULT_OUTPUT_TOKENS
        limit = req.body.get("max_completion_tokens") or req.body.get("max_tokens")
        if isinstance(limit, int) and limit > 0:
            out = min(out, limit)
        n = req.body.get("n") or 1
        return [
            Candidate(
                backend=b.name, model=b.model, predicted_quality=float(quality.get(b.name, 0.5)),
                expected_cost_usd=cost_usd(self.pricing[b.name], tokens_in, out * n), expected_output_tokens=out * n,
            )
            for b in backends
        ]

    def _apply_rules(self, route: RouteConfig, req: RoutingRequest,
                     backends: list[BackendConfig]) -> tuple[list[BackendConfig], list[str]]:
        notes = []
        for rule in self._rules(route, req):
            if rule.require_tags:
                backends = [b for b in backends if set(rule.require_tags) <= set(b.tags)]
                notes.append(f"{rule.name}: require tags {rule.require_tags}")
        return backends, notes

    def _cost_rules(self, route: RouteConfig, req: RoutingRequest,
                    cands: list[Candidate]) -> tuple[list[Candidate], list[str]]:
        notes = []
        for rule in self._rules(route, req):
            if rule.max_cost_usd is not None:
                cands = [c for c in cands if c.expected_cost_usd <= rule.max_cost_usd]
                notes.append(f"{rule.name}: max cost {rule.max_cost_usd} USD")
        return cands, notes

    def _rules(self, route: RouteConfig, req: RoutingRequest):
        for rule in self.policy.rules:
            if rule.routes and route.name not in rule.routes:
                continue
            if rule.when_header and rule.when_header.lower() not in req.headers:
                continue
            yield rule

    @staticmethod
    def _bar(route: RouteConfig, cands: list[Candidate]) -> float:
        qb = route.quality_bar
        if qb.min_quality is not None:
            return qb.min_quality
        return qb.target * max(c.predicted_quality for c in cands)

    @staticmethod
    def _choose(route: RouteConfig, cands: list[Candidate]) -> tuple[Candidate, str]:
        order = {c.backend: i for i, c in enumerate(cands)}
        eligible = [c for c in cands if c.eligible]
        if eligible:
            best = min(eligible, key=lambda c: (c.expected_cost_usd, -c.predicted_quality, order[c.backend]))
            return best, "cheapest_above_bar" if len(cands) > 1 else "only_candidate"
        if route.on_no_candidate == "reject":
            raise NoCandidate(f"No backend of route '{route.name}' is predicted to clear its quality bar")
        if route.on_no_candidate == "cheapest":
            return min(cands, key=lambda c: (c.expected_cost_usd, order[c.backend])), "below_bar_cheapest"
        return max(cands, key=lambda c: (c.predicted_quality, -order[c.backend])), "below_bar_best_quality"


def candidate_dict(c: Candidate) -> dict[str, Any]:
    """JSON-ready view of a candidate (used by ``/v1/route``)."""
    return vars(c).copy()
