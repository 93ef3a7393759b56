"""The routing policy as typed models (``extra="forbid"`` everywhere). The backends' own
entries (:class:`~backends.config.BackendConfig`, :class:`~backends.config.Pricing`) are
defined on the floor, in :mod:`backends.config`.

A policy YAML has ``version``, ``backends``, ``routes`` and optional ``rules`` and
``default_route``; see ``router/policy/demo.yaml`` for an annotated example. Prices are
USD per one million tokens (``per_request`` is USD per call). Cross-references (route ->
backend names, unique names) are checked by :func:`router.policy.loader.load_policy`,
which reports ``FILE:LINE path: problem``.
"""

from __future__ import annotations

import re
from functools import cached_property
from typing import Literal

from pydantic import Field, field_validator, model_validator

from backends.config import BackendConfig, Pricing
from backends.fields import NAME_PATTERN, Integer, Number, Strict, Version
from backends.pricing import sets_base_price
from router.policy.learning_config import LearningConfig
from router.policy.quality_bar import QualityBar
from router.policy.rewrite_config import RewriteConfig
from router.policy.runaway_config import RunawayConfig
from router.policy.session_config import SessionConfig
from router.policy.signals import SignalName, Threshold


def pricing_notes(policy: "Policy") -> list[str]:
    """Advice on a valid policy: each ``vllm`` backend without ``pricing``, or whose ``pricing``
    does not price a whole call (:func:`backends.pricing.sets_base_price`: one token price, or
    cache prices only), is costed at $0 for what is unpriced (no price map covers self-hosted
    models), so it wins every route where it clears the bar."""
    return [f"backend '{b.name}' (vllm) has {'no pricing' if b.pricing is None else 'no price for every token'}: "
            "what is unpriced is costed at $0, and it wins every route where it clears the bar; give 'pricing: "
            "{gpu_usd_per_hour: ..., output_tokens_per_s: ...}' or both 'input_per_1m' and 'output_per_1m' "
            "('{input_per_1m: 0, output_per_1m: 0}' to say it is free)"
            for b in policy.backends if b.kind == "vllm" and not sets_base_price(b.pricing)]


class RouteConfig(Strict):
    """A route: what a client names as ``model`` to get routed.

    Attributes:
        name: the route name (``auto`` is the default route).
        backends: candidate backend names, in preference order for ties.
        quality_bar: see :class:`QualityBar`.
        on_no_candidate: when no candidate clears the bar: ``best_quality`` (send to
            the candidate with the highest predicted quality), ``cheapest`` or
            ``reject`` (HTTP 422 ``no_candidate``).
        max_attempts: candidates tried in order on retryable failures (>= 1).
        ttft_slo_s: time-to-first-token SLO in seconds: a candidate whose predicted TTFT
            (:mod:`router.live`) breaks it is skipped.
        on_saturated: when every candidate that clears the bar breaks the SLO:
            ``best_effort`` (ignore the SLO), ``degrade`` (the cheapest candidate that
            meets the SLO, even below the bar) or ``reject`` (HTTP 429 with retry-after).
        description: shown in ``/v1/models``.
        rewrite: rewrite prompts for prefix caches (:mod:`router.rewrite`); off: the
            request is sent as received (its ``prefix_hash`` is still computed).
        session: how conversations are kept on one model (:class:`SessionConfig`).
    """

    name: str = Field(pattern=NAME_PATTERN)
    backends: list[str] = Field(min_length=1)
    quality_bar: QualityBar = QualityBar(target=0.95)
    on_no_candidate: Literal["best_quality", "cheapest", "reject"] = "best_quality"
    max_attempts: Integer = Field(default=3, ge=1, le=10)
    ttft_slo_s: Number | None = Field(default=None, gt=0)
    on_saturated: Literal["best_effort", "degrade", "reject"] = "best_effort"
    description: str = ""
    rewrite: bool = True
    session: SessionConfig = SessionConfig()


class RuleConfig(Strict):
    """A rule evaluated before scoring. A rule applies when all its conditions hold
    (``routes``, ``tenants``, ``when_header``, ``when_signal``, ``when_signal_below``); then
    each action it sets
    is taken, in this order: ``block``, ``route_to``, ``allow_backends``,
    ``require_tags``, ``max_cost_usd``.

    Attributes:
        name: shown in the decision's reason.
        routes: routes it applies to (empty: all).
        tenants: tenants it applies to (empty: all).
        when_header: applies when this request header is present (any name, e.g. ``x-priority``;
            matched case-insensitively, on its presence only).
        when_signal: applies when every named classifier signal is at least its threshold,
            e.g. ``{pii: 0.5}`` or ``{injection: 0.8}`` (probabilities).
        when_signal_below: applies when every named classifier signal is strictly below its
            threshold, e.g. ``{scan_coverage: 1}``: a long prompt whose middle no classifier
            window read (``pii``/``injection`` could not vouch for all of it). A signal the
            request lacks (no classifier, pinned path without signal rules) satisfies neither
            condition, so such a rule does not fire.
        block: refuse the request (HTTP 400, code ``prompt_blocked``).
        route_to: send the request to this backend only (e.g. a hardened model).
        allow_backends: only these backends stay candidates (per-tenant allow lists).
        require_tags: only backends with all these tags stay candidates.
        max_cost_usd: a cost limit per request (USD). Under ``max_cost_mode: expected``
            (the default) candidates whose expected cost exceeds it are dropped; an answer
            longer than predicted can still cost more.
        max_cost_mode: ``hard`` makes ``max_cost_usd`` a ceiling: candidates whose prompt
            alone costs more are dropped, and the request's output-token limit
            (``max_tokens``, or ``max_completion_tokens`` where the client sent it) is lowered
            on each candidate to the most the rest of the limit buys
            (:func:`router.cost.output_tokens_within`), so that a long answer is cut
            (``finish_reason: length``) rather than billed over the limit.
    """

    name: str = Field(min_length=1)
    routes: list[str] = Field(default_factory=list)
    tenants: list[str] = Field(default_factory=list)
    when_header: str | None = None
    when_signal: dict[SignalName, Threshold] = Field(default_factory=dict)
    when_signal_below: dict[SignalName, Threshold] = Field(default_factory=dict)
    block: bool = False
    route_to: str | None = None
    allow_backends: list[str] = Field(default_factory=list)
    require_tags: list[str] = Field(default_factory=list)
    max_cost_usd: Number | None = Field(default=None, ge=0)
    max_cost_mode: Literal["expected", "hard"] = "expected"

    @field_validator("when_header")
    @classmethod
    def _header_name(cls, name: str | None) -> str | None:
        # RFC 9110 field names are tokens: no spaces, colons or other separators.
        if name is not None and not re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", name):
            raise ValueError(f"{name!r} is not an HTTP header name (letters, digits and !#$%&'*+-.^_`|~ only, "
                             "e.g. x-priority)")
        return name

    @model_validator(mode="after")
    def _signals_can_hold(self) -> "RuleConfig":
        for name, below in self.when_signal_below.items():
            if below <= 0:
                raise ValueError(f"when_signal_below {{{name}: {below}}} never holds (signals are at least 0)")
            if name in self.when_signal and self.when_signal[name] >= below:
                raise ValueError(f"'{name}' cannot be at least {self.when_signal[name]} and below {below}: "
                                 "the rule would never fire")
        return self

    @model_validator(mode="after")
    def _has_action(self) -> "RuleConfig":
        if not (self.block or self.route_to or self.allow_backends or self.require_tags
                or self.max_cost_usd is not None):
            raise ValueError("a rule needs an action: block, route_to, allow_backends, require_tags or max_cost_usd")
        if "max_cost_mode" in self.model_fields_set and self.max_cost_usd is None:
            raise ValueError("'max_cost_mode' needs 'max_cost_usd': the limit it enforces")
        if self.block and (self.route_to or self.allow_backends or self.require_tags):
            raise ValueError("'block' contradicts 'route_to', 'allow_backends' and 'require_tags'")
        if self.route_to and self.allow_backends and self.route_to not in self.allow_backends:
            raise ValueError(f"'route_to: {self.route_to}' is not in its own 'allow_backends' "
                             f"({', '.join(self.allow_backends)}): every request the rule matches would have no candidate")
        return self


class LimitsConfig(Strict):
    """How rate limits and budgets behave.

    Attributes:
        on_unavailable: when the shared limiter state (Redis) cannot be reached:
            ``open`` admits the request unlimited (and logs and counts it), ``closed``
            answers 503 ``limits_unavailable``.
    """

    on_unavailable: Literal["open", "closed"] = "open"


class Policy(Strict):
    """A whole routing policy (``version: 1``)."""

    version: Version
    default_route: str = "auto"
    backends: list[BackendConfig] = Field(min_length=1)
    routes: list[RouteConfig] = Field(min_length=1)
    rules: list[RuleConfig] = Field(default_factory=list)
    limits: LimitsConfig = LimitsConfig()
    rewrite: RewriteConfig = RewriteConfig()
    runaway: RunawayConfig = RunawayConfig()
    learning: LearningConfig | None = None

    def backend(self, name: str) -> BackendConfig | None:
        """The backend called ``name`` (``None`` if there is none): a dict lookup, since the
        decision path looks every candidate up."""
        return self._index()[0].get(name)

    def route(self, name: str) -> RouteConfig | None:
        """The route called ``name`` (``None`` if there is none)."""
        return self._index()[1].get(name)

    def _index(self) -> tuple[dict[str, BackendConfig], dict[str, RouteConfig]]:
        # Kept with the very lists it indexes: model_copy(update={"routes": ...}) copies the
        # cached entry too (calibration copies policies with other bars), and a copy whose
        # lists are new objects must index its own.
        cached = self._by_name
        if cached[0] is not self.backends or cached[1] is not self.routes:
            del self.__dict__["_by_name"]
            cached = self._by_name
        return cached[2], cached[3]

    @cached_property
    def _by_name(self) -> tuple[list, list, dict[str, BackendConfig], dict[str, RouteConfig]]:
        # The first of a name wins, as a scan would (names are unique once validated).
        # Equality and dumps ignore it.
        backends: dict[str, BackendConfig] = {}
        routes: dict[str, RouteConfig] = {}
        for b in self.backends:
            backends.setdefault(b.name, b)
        for r in self.routes:
            routes.setdefault(r.name, r)
        return self.backends, self.routes, backends, routes
