"""The decision engine: Policy x Prediction x live state -> Decision.

One function decides for the gateway and for offline evaluation. For a route with
candidates C and quality bar q:

1. The predictor reads the prompt once: quality per candidate, expected output length
   and signals (``pii``, ``injection``, ``domain``...) (:mod:`router.predict`).
2. Rules (:mod:`router.rules`) may block, redirect, or narrow the candidates (tenant
   allow lists, tags, signal thresholds) and cap the expected cost, or (``max_cost_mode:
   hard``) the most a call can cost, by an output-token limit per candidate
   (:meth:`Router._within`).
3. Each candidate gets an expected cost (:mod:`router.cost`; input tokens estimated from
   the prompt and its tool definitions, :func:`~backends.openai_shapes.prompt_tokens`, output tokens = min(predicted
   length, ``max_tokens``)) and a predicted TTFT from live state (:mod:`router.live`).
4. The bar: ``min_quality`` (absolute), ``target x max(predicted quality)`` (relative), or
   for ``willingness_to_pay`` w the predicted quality of the candidate maximising
   ``w x quality - cost`` (no candidate costs less and predicts as much, so the cheapest
   candidate clearing that bar is that candidate). ``route_target`` sets, so that the
   route's recent requests keep the target share of their summed best predicted quality
   (:mod:`router.aggregate`), either the route's own ``w`` for that rule (``allocation:
   lagrangian``, the default; recorded as ``signals.route_wtp_usd``) or its own share for
   the relative rule (``allocation: share``; ``signals.route_share``), both on the
   candidates' lower bounds ``quality - uncertainty_z x sd``.
5. The choice (:func:`router.choice.choose`) is the cheapest candidate that clears the bar and meets the
   route's TTFT SLO (ties: higher quality, then policy order); ``on_saturated`` and
   ``on_no_candidate`` decide the other cases.
6. Fallbacks: the other candidates, bar-clearing ones by cost first, then the rest by
   predicted quality (none of the rest under ``on_no_candidate: reject``), truncated to
   ``max_attempts - 1``.
7. Exploration (the policy's ``learning.explore``): a share of requests goes to another of
   the candidates kept in 2-3, drawn by uncertainty; the decision's ``probability`` is the
   chance its choice had (:mod:`router.learning.explore`).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from contextlib import nullcontext
from math import isfinite

from backends.catalog import resolve_context, resolve_pricing
from backends.config import BackendConfig, Pricing
from backends.openai_shapes import (completions_asked, estimate_tokens, max_tokens_asked, prompt_text, prompt_tokens,
                                    stable_prefix_text)
from backends.pricing import cost_usd
from router.aggregate import BAR_TOLERANCE
from router.choice import choose, note
from router.cost import within_hard_limit
from router.decision import Candidate, Decision, RoutingRequest
from router.embeddings import decide_embedding
from router.errors import (BackendNotAllowed, ContextTooLong, InvalidRequest, NoAllowedCandidate, NoCandidate,
                           RequestRejected, UnknownModel, WrongTask)
from router.learning.explore import explore, other_choice
from router.learning.prompt import prompt_key
from router.learning.shadow import Shadow, shadow_signal
from router.live import LiveState
from router.policy.loader import LoadedPolicy
from router.policy.models import RouteConfig
from router.policy.tasks import ENDPOINT_TASK, target_task, wrong_task_message
from router.predict import DEFAULT_OUTPUT_TOKENS, UNKNOWN_QUALITY, Predictor, PriorPredictor
from router.records import DecisionRecord
from router.rewrite import DocumentOptions, RewriteOptions, rewrite
from router.rules import PromptBlocked, apply_rules, needs_signals, pinned_rules
from router.session import cached_tokens_of, keep_session, open_session, session_signal

#: What the engine refuses a read request with (after the model is resolved): each carries
#: ``record``, the refusal's :class:`DecisionRecord`, for the store.
REFUSALS = (NoCandidate, RequestRejected, PromptBlocked, BackendNotAllowed, ContextTooLong)

_EPS = BAR_TOLERANCE  # 1e-9: a candidate clears the bar when quality + _EPS >= bar
#: Header an admin may send to force a backend on a routed request.
OVERRIDE_HEADER = "x-mixroute-backend-override"


class Router:
    """Routes requests under one loaded policy.

    Args:
        loaded: the validated policy.
        predictor: quality/length predictor; the prior baseline when ``None``.
        live: live backend state for TTFT prediction (shared across policy reloads).
        adapter_version: the adapter version ``predictor`` and the outcome memory's
            correction come from, recorded on every decision (:mod:`router.learning.versions`).
        shadow: a version decided beside every routed request, recorded in its
            ``signals.shadow`` (:mod:`router.learning.shadow`).
    """

    def __init__(self, loaded: LoadedPolicy, predictor: Predictor | None = None, live: LiveState | None = None,
                 adapter_version: str | None = None, shadow: Shadow | None = None):
        self.loaded = loaded
        self.adapter_version, self.shadow = adapter_version, shadow
        self.policy = loaded.policy
        self.predictor: Predictor = predictor or PriorPredictor()
        self.live = live or LiveState()
        self.pricing: dict[str, Pricing] = {b.name: resolve_pricing(b) for b in self.policy.backends}
        self.context: dict[str, int | None] = {b.name: resolve_context(b) for b in self.policy.backends}
        self._route_backends: dict[str, tuple[RouteConfig, list[BackendConfig]]] = {}
        # exploration's draws: seeded (learning.seed), so a replay decides the same
        self._rng = random.Random(self.policy.learning.seed if self.policy.learning is not None else 0)
        docs = self.policy.rewrite.documents
        self._documents = DocumentOptions(enabled=docs.enabled, order=docs.order, tags=tuple(docs.tags),
                                          markers=tuple((m.start, m.end) for m in docs.markers))

    def _backends_of(self, route: RouteConfig) -> list[BackendConfig]:
        """The route's backends, looked up once per route object (a new list each call)."""
        cached = self._route_backends.get(route.name)
        if cached is None or cached[0] is not route:
            cached = self._route_backends[route.name] = (route, [self.policy.backend(n) for n in route.backends])
        return list(cached[1])

    def target(self, model: str) -> tuple[RouteConfig | None, BackendConfig | None]:
        """Resolve a request's ``model`` to a route or a pinned backend (both ``None``: unknown)."""
        route = self.policy.route(model)
        return (route, None) if route else (None, self.policy.backend(model))

    async def decide(self, req: RoutingRequest) -> Decision:
        """Decide where ``req`` goes; the decision (or the refusal's record) carries this
        router's ``adapter_version``.

        Raises:
            router.errors.UnknownModel: ``model`` names neither a route nor a backend.
            router.errors.WrongTask: ``model`` serves the other task (an embedding model on a
                chat endpoint, a chat model on ``/v1/embeddings``, which
                :func:`router.embeddings.decide_embedding` decides for).
            router.errors.NoCandidate: ``on_no_candidate: reject`` and no candidate clears the
                bar (422); :class:`~router.errors.NoAllowedCandidate` (403): rules or cost
                limits left none.
            router.rules.PromptBlocked, router.errors.BackendNotAllowed,
            router.errors.ContextTooLong, router.errors.RequestRejected: see
                :data:`REFUSALS`; each carries ``record``, its :class:`DecisionRecord`.
        """
        try:
            decision = await self._decide(req)
        except REFUSALS as exc:
            record = getattr(exc, "record", None)
            if record is not None:
                record.adapter_version = self.adapter_version
            raise
        decision.record.adapter_version = self.adapter_version
        return decision

    async def _decide(self, req: RoutingRequest) -> Decision:
        model = req.body.get("model") or self.policy.default_route
        route, pinned = self.target(model)
        if route is None and pinned is None:
            known = [r.name for r in self.policy.routes] + [b.name for b in self.policy.backends]
            raise UnknownModel(f"The model '{model[:100]}{'...' if len(model) > 100 else ''}' does not exist (routes and backends: {', '.join(known)})",
                               param="model")
        task, wanted = target_task(self.policy, route, pinned), ENDPOINT_TASK.get(req.endpoint, "chat")
        if task != wanted:
            raise WrongTask(wrong_task_message(self.policy, model, task, wanted), param="model")
        if req.endpoint == "embeddings":
            return decide_embedding(self.loaded, self.pricing, req, route, pinned)
        with req.span("mixroute.rewrite") if req.span else nullcontext():
            rewritten = rewrite(req.body, RewriteOptions(enabled=route.rewrite if route else True,
                                                         volatile_patterns=tuple(self.policy.rewrite.volatile_patterns),
                                                         documents=self._documents))
        body, phash = rewritten
        text = prompt_text(req.endpoint, body)
        # The classifier reads the client's own prompt: the rewriter's note of moved values
        # ("[mixroute: values of the placeholders ...]") is not the user's text, and its
        # instruction-like wording would read as an injection attempt.
        original = text if body is req.body else prompt_text(req.endpoint, req.body)
        tokens_in = prompt_tokens(req.endpoint, req.body, text)  # once: the context check, costs and limits read it
        override = req.headers.get(OVERRIDE_HEADER)
        if override and req.admin and route is None:
            raise InvalidRequest(f"{OVERRIDE_HEADER} overrides a route's choice, but model '{model}' already names "
                                 "a backend; send the route's name as model", param=OVERRIDE_HEADER)
        if override and req.admin and route is not None:
            pinned = self.policy.backend(override)
            if pinned is None:
                raise UnknownModel(f"{OVERRIDE_HEADER}: unknown backend '{override}'", param=OVERRIDE_HEADER)
        if pinned is not None:
            signals = {}
            try:
                ruled = None
                if not req.admin:  # an admin's pin (model or override header) is trusted; anyone else's obeys the rules
                    if needs_signals(self.policy, pinned):
                        signals = (await self.predictor.predict(original, [pinned])).signals
                    ruled = pinned_rules(self.policy, pinned, req.tenant, req.headers, signals)
                decision = await self._pinned(req, body, phash, tokens_in, pinned)
                if ruled is not None:
                    cost = decision.candidates[0].expected_cost_usd
                    if ruled.max_cost_usd is not None and cost > ruled.max_cost_usd:
                        raise BackendNotAllowed(f"Backend '{pinned.name}' would cost about {cost:.6f} USD for this "
                                                f"request, over the policy's limit of {ruled.max_cost_usd} USD",
                                                param="model")
                    if ruled.hard_cost_usd is not None:
                        if not self._within(req, tokens_in, decision.candidates, ruled.hard_cost_usd):
                            raise BackendNotAllowed(f"Backend '{pinned.name}' cannot answer this request within the "
                                                    f"policy's hard limit of {ruled.hard_cost_usd} USD (the prompt "
                                                    "alone, or with one output token per completion, costs more)",
                                                    param="model")
                        decision.record.candidates = [vars(decision.candidates[0]).copy()]
                    decision.record.signals["rules"] = ruled.notes
            except REFUSALS as exc:
                exc.record = self._refusal(req, route.name if route else pinned.name, exc, signals, rewritten, phash,
                                           pinned=True)
                raise
            if route is not None:
                decision.record.route, decision.record.reason = route.name, "admin_override"
            decision.record.signals["rewrite"] = rewritten.signals()
            decision.record.signals["prompt_hash"] = prompt_key(original)
            return decision
        backends = self._backends_of(route)
        raw = await self.predictor.predict(original, backends)
        prediction = self.live.outcomes.adjust(raw, backends, self.policy.learning)
        try:
            decision = self._route(req, route, backends, prediction, body, phash, tokens_in, rewritten)
            decision.record.signals["prompt_hash"] = prompt_key(original)  # the retry signal's key
            if self.shadow is not None:
                decision.record.signals["shadow"] = await shadow_signal(
                    self.shadow, req, original, backends, raw, self.policy.learning,
                    lambda r, p: self._route(r, route, backends, p, body, phash, tokens_in, rewritten), REFUSALS)
            return decision
        except REFUSALS as exc:
            exc.record = self._refusal(req, route.name, exc, {**prediction.signals, "predictor": prediction.source},
                                       rewritten, phash)
            raise

    def _refusal(self, req: RoutingRequest, route: str, exc, signals: dict, rewritten, phash: str,
                 pinned: bool = False) -> DecisionRecord:
        """The decision record of a refused request: its route (or pinned backend), signals and
        scored candidates say which route refuses what and why (``signals.refused``: the
        client's message, which names the rule, the bar or the context window)."""
        bar = getattr(exc, "bar", None)
        return DecisionRecord(
            request_id=req.request_id, route=route, policy_hash=self.loaded.hash, chosen="", reason=exc.code,
            candidates=[vars(c).copy() for c in getattr(exc, "candidates", [])],
            signals={**signals, "refused": exc.message, **({"bar": bar} if bar is not None else {}),
                     "rewrite": rewritten.signals()},
            tenant=req.tenant, endpoint=req.endpoint, prefix_hash=phash, pinned=pinned,
        )

    def _route(self, req: RoutingRequest, route: RouteConfig, backends: list[BackendConfig], prediction,
               body: dict, phash: str, tokens_in: int, rewritten) -> Decision:
        """The decision for a request to ``route`` (steps 2-6 of the module docstring).

        Raises:
            router.rules.PromptBlocked, router.errors.NoCandidate, router.errors.RequestRejected,
            router.errors.ContextTooLong: as :meth:`decide`; a refusal by :func:`~router.choice.choose`
                carries ``candidates`` and ``bar``.
        """
        ruled = apply_rules(self.policy, route, backends, req.tenant, req.headers, prediction.signals)
        if not ruled.backends:
            raise NoAllowedCandidate(f"No backend of route '{route.name}' is allowed for this request "
                                     f"({'; '.join(ruled.notes)})")
        quality = {b.name: prediction.quality.get(b.name, b.quality if b.quality is not None else UNKNOWN_QUALITY)
                   for b in ruled.backends}
        fitting = self._fitting(req, tokens_in, ruled.backends, f"every backend of route '{route.name}'")
        by_name = {b.name: b for b in fitting}
        session = req.session if route.session.enabled and req.session is not None else None
        cands = self._score(req, tokens_in, fitting, quality, prediction.output_tokens, body, phash, session)
        for c in cands:
            c.quality_sd = prediction.quality_sd.get(c.backend)
        scored = cands
        if ruled.max_cost_usd is not None:
            for c in cands:
                if c.expected_cost_usd > ruled.max_cost_usd:
                    c.note = f"expected cost {c.expected_cost_usd:.6g} USD over the limit of {ruled.max_cost_usd} USD"
            cands = [c for c in cands if c.expected_cost_usd <= ruled.max_cost_usd]
        if ruled.hard_cost_usd is not None:
            cands = self._within(req, tokens_in, cands, ruled.hard_cost_usd)
        if not cands:
            exc = NoAllowedCandidate(f"No backend of route '{route.name}' is within the cost limits "
                                     f"({'; '.join(ruled.notes)})")
            exc.candidates = scored  # recorded by _refusal, each with the note that left it out
            raise exc
        qb = route.quality_bar
        share = ctl = None
        price = qb.willingness_to_pay  # USD per unit of quality: the bar's, or the route's (below)
        held = {c.backend: c.predicted_quality for c in cands}  # the quality the bar is tested on
        if qb.route_target is not None:  # the route's current share of the best, this request included
            z = qb.z
            for c in cands:
                c.quality_bound = round(max(0.0, c.predicted_quality - z * (c.quality_sd or 0.0)), 6)
                held[c.backend] = c.quality_bound
            ctl = self.live.route_target(route.name, qb.route_target, qb.window, tuple(route.backends), z,
                                         qb.allocation_in_force)
            points = [(c.expected_cost_usd, held[c.backend]) for c in cands]
            share = ctl.peek(points) if req.dry_run else ctl.add(points)
            if ctl.allocation == "lagrangian":
                price, share = share, None
        if price is not None and isfinite(price):
            for c in cands:
                c.utility_usd = price * held[c.backend] - c.expected_cost_usd
        bar = self._bar(route, cands, share, held, price)
        for c in cands:
            c.eligible = held[c.backend] + _EPS >= bar
            c.predicted_ttft_s = self.live.predicted_ttft(by_name[c.backend])
            c.meets_slo = route.ttft_slo_s is None or c.predicted_ttft_s is None or c.predicted_ttft_s <= route.ttft_slo_s
            c.note = note(c, held[c.backend], bar, route.ttft_slo_s)
        try:
            chosen, reason = choose(route, cands)
        except (NoCandidate, RequestRejected) as exc:
            exc.candidates, exc.bar = cands, bar
            raise
        switch = None
        if session is not None and session.backend is not None:
            chosen, reason, switch = keep_session(route, session, cands, chosen, reason, tokens_in, self.pricing)
        elif session is not None:
            chosen, reason, switch = open_session(cands, chosen, reason, tokens_in, self.pricing,
                                                  self.live.session_turns(route.name))
        if session is not None and not req.dry_run:
            self.live.session_turn(route.name, first=session.turns == 0)
        probability = ctl.probability if ctl is not None and not req.dry_run else 1.0
        learning = self.policy.learning
        if learning is not None and learning.explore > 0 and not req.dry_run and switch is None:
            other = None if ctl is None or ctl.other_level is None else other_choice(
                route, cands, held, ctl.other_level, ctl.allocation == "lagrangian", price,
                lambda cs, s, p: self._bar(route, cs, s, held, p))
            pick = explore(learning.explore, cands, chosen, probability, self._rng, route.on_no_candidate == "reject",
                           other)
            chosen, probability = pick.chosen, pick.propensity
            reason = "explore" if pick.explored else reason
        on_fallback = None
        if ctl is not None and not req.dry_run:
            row = ctl.chose(held[chosen.backend])
            if row is not None:
                on_fallback = lambda backend: ctl.answered(row, held.get(backend))  # noqa: E731
        bar_kind = qb.kind
        if price is not None and reason == "cheapest_above_bar":
            reason = "max_utility"  # the candidate maximising w x quality - cost (it defines the bar)
        rest = [c for c in cands if c is not chosen]
        if route.on_no_candidate == "reject":
            # The route refuses rather than answer below its bar, so a failed choice falls
            # back to other bar-clearing candidates only.
            rest = [c for c in rest if c.eligible]
        rest.sort(key=lambda c: (not c.eligible, not c.meets_slo,
                                 c.expected_cost_usd if c.eligible else -c.predicted_quality))
        record = DecisionRecord(
            request_id=req.request_id, route=route.name, policy_hash=self.loaded.hash, chosen=chosen.backend,
            reason=reason, candidates=[vars(c).copy() for c in cands],
            fallbacks=[c.backend for c in rest][: route.max_attempts - 1],
            signals={**prediction.signals, "predictor": prediction.source, "bar": bar,
                     "bar_kind": {bar_kind: getattr(qb, bar_kind)}, "rules": ruled.notes,
                     # backends of the route left out because the request would not fit their context window
                     **({"too_long_for": [b.name for b in ruled.backends if b.name not in by_name]}
                        if len(fitting) < len(ruled.backends) else {}),
                     **({"route_held": ctl.held, "uncertainty_z": qb.z, "allocation": ctl.allocation,
                         # an unbounded price (every request its best) is recorded as null: JSON has no inf
                         **({"route_share": share} if price is None else
                            {"route_wtp_usd": price if isfinite(price) else None})}
                        if ctl is not None else {}),
                     "rewrite": rewritten.signals(),
                     **({"session": session_signal(session, switch)} if session is not None else {})},
            tenant=req.tenant, endpoint=req.endpoint, prefix_hash=phash,
            probability=probability,
        )
        return Decision(record=record, body=body, candidates=cands, bar=bar, on_fallback=on_fallback,
                        reserve=[c.backend for c in rest][route.max_attempts - 1:])

    def _fitting(self, req: RoutingRequest, tokens: int, backends: Sequence[BackendConfig],
                 where: str) -> list[BackendConfig]:
        """The ``backends`` whose context window (when known) holds the prompt (``tokens``,
        estimated: :func:`~backends.openai_shapes.prompt_tokens`) plus its ``max_tokens``.

        Raises:
            router.errors.ContextTooLong: none does (param ``max_tokens`` when the prompt
                alone would fit somewhere, else ``messages``, or ``prompt`` for legacy completions).
        """
        limit = max_tokens_asked(req.body)
        needed = tokens + (limit or 0)
        fitting = [b for b in backends if (self.context.get(b.name) or needed) >= needed]
        if not fitting:
            prompt_only = any((self.context.get(b.name) or needed) >= tokens for b in backends)
            if prompt_only and limit is not None:
                raise ContextTooLong(f"The request (~{tokens} prompt tokens plus max_tokens {limit}) "
                                     f"exceeds the context window of {where}; lower max_tokens", param="max_tokens")
            raise ContextTooLong(f"The request (~{tokens} prompt tokens) exceeds the context window of "
                                 f"{where}", param="prompt" if req.endpoint == "completions" else "messages")
        return fitting

    async def _pinned(self, req: RoutingRequest, body: dict, phash: str, tokens_in: int,
                      b: BackendConfig) -> Decision:
        self._fitting(req, tokens_in, [b], f"backend '{b.name}' ({self.context.get(b.name)} tokens)")
        cands = self._score(req, tokens_in, [b], {}, None, body, phash)
        cands[0].predicted_quality = b.quality  # no prediction is made for a pinned request
        cands[0].eligible = True
        record = DecisionRecord(
            request_id=req.request_id, route=b.name, policy_hash=self.loaded.hash, chosen=b.name, reason="pinned",
            candidates=[vars(cands[0]).copy()], tenant=req.tenant, endpoint=req.endpoint, pinned=True,
            prefix_hash=phash,
        )
        return Decision(record=record, body=body, candidates=cands)

    def _score(self, req: RoutingRequest, tokens_in: int, backends: Sequence[BackendConfig],
               quality: dict[str, float], output_tokens: int | None, body: dict | None = None,
               phash: str | None = None, session=None) -> list[Candidate]:
        out = output_tokens or DEFAULT_OUTPUT_TOKENS
        limit = max_tokens_asked(req.body)
        if limit is not None:
            out = min(out, limit)
        n = completions_asked(req.endpoint, req.body)  # n, or prompts x max(n, best_of) for legacy completions
        stable = min(tokens_in, estimate_tokens(stable_prefix_text(body or req.body)))
        cands = []
        for b in backends:
            # Expected prefix-cache hit: the stable prefix, when this backend answered the
            # same prefix hash within the cache TTL (router.live.PREFIX_TTL_S).
            cached = stable if phash and self.live.prefix_warm(b.name, phash) else 0
            written = 0
            if session is not None and session.backend is not None:
                # The session's real cache state: its backend reads the conversation's prefix;
                # any other prefills all of it cold and writes it to its own cache.
                cached = max(cached, cached_tokens_of(session, b.name, tokens_in))
                written = tokens_in - cached
            cands.append(Candidate(
                backend=b.name, model=b.model, predicted_quality=float(quality.get(b.name, 0.5)),
                expected_cost_usd=cost_usd(self.pricing[b.name], tokens_in, out * n, cached, written),
                expected_output_tokens=out * n, expected_cached_tokens=cached,
                cost_ceiling_usd=None if limit is None else cost_usd(self.pricing[b.name], tokens_in, limit * n, cached),
                output_tokens_ceiling=None if limit is None else limit * n,
            ))
        return cands

    def _within(self, req: RoutingRequest, tokens_in: int, cands: list[Candidate], limit_usd: float) -> list[Candidate]:
        """The candidates that can answer within a hard cost limit (``max_cost_mode: hard``),
        each capped to it: :func:`router.cost.within_hard_limit` with this router's prices
        and context windows, the request's completions and its output-token limit as
        backends read it (:func:`~backends.openai_shapes.max_tokens_asked`). Modifies ``cands``."""
        return within_hard_limit(cands, self.pricing, self.context, tokens_in, completions_asked(req.endpoint, req.body),
                                 max_tokens_asked(req.body), limit_usd)

    @staticmethod
    def _bar(route: RouteConfig, cands: list[Candidate], share: float | None, held: dict[str, float],
             price: float | None = None) -> float:
        """The quality a candidate must reach; ``held``: backend -> the quality tested
        (``quality_bound`` under ``route_target``, else ``predicted_quality``); ``price``:
        the willingness to pay (USD per unit of quality) of a ``willingness_to_pay`` bar, or
        of a ``route_target`` bar under the ``lagrangian`` allocation (``inf``: the best),
        with ``utility_usd`` set by decide(): the bar is then the quality of the candidate
        maximising it."""
        qb = route.quality_bar
        if qb.min_quality is not None:
            return qb.min_quality
        if price is not None:
            if not isfinite(price):
                return max(held[c.backend] for c in cands)
            tolerance = _EPS * (price if qb.willingness_to_pay is not None else max(price, 1.0))
            top = max(c.utility_usd for c in cands) - tolerance
            return max(held[c.backend] for c in cands if c.utility_usd >= top)
        return (qb.target if share is None else share) * max(held[c.backend] for c in cands)

