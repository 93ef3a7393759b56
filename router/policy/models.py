"""The routing policy as typed models (``extra="forbid"`` everywhere).

A policy YAML has ``version``, ``backends``, ``routes`` and optional ``rules`` and
``default_route``; see ``router/policy/demo.yaml`` for an annotated example. Prices are
USD per one million tokens (``per_request`` is USD per call). Cross-references (route ->
backend names, unique names) are checked by :func:`router.policy.loader.load_policy`,
which reports ``FILE:LINE path: problem``.
"""

from __future__ import annotations

import re
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, Field, SecretStr, field_validator, model_validator

from router.policy.base import NAME_PATTERN, Integer, Number, Version, _Strict
from router.policy.endpoints import check_distinct, check_endpoint, check_one_authorization
from router.policy.quality_bar import QualityBar
from router.policy.rewrite_config import RewriteConfig
from router.policy.session_config import SessionConfig
from router.policy.signals import SignalName, Threshold


#: Largest accepted price (USD per 1M tokens, per request or per GPU hour): far above any
#: real one, far below where a request's cost could overflow a float.
PRICE_MAX = 1_000_000.0
#: Smallest accepted measured throughput of a self-hosted pool (tokens/s).
THROUGHPUT_MIN = 0.001


class Pricing(_Strict):
    """Prices in USD.

    Attributes:
        input_per_1m: USD per 1M prompt tokens.
        output_per_1m: USD per 1M completion tokens.
        cached_input_per_1m: USD per 1M prompt tokens served from a prefix cache
            (defaults to ``input_per_1m``: no discount).
        cache_write_input_per_1m: USD per 1M prompt tokens written to a prefix cache
            (Anthropic's ``cache_creation_input_tokens``, billed at 1.25x the input price for
            the 5-minute cache; defaults to ``input_per_1m``: no surcharge).
        cache_write_1h_input_per_1m: USD per 1M prompt tokens written to Anthropic's 1-hour
            cache (a breakpoint with ``"ttl": "1h"``, billed at 2x the input price, Anthropic's
            prompt caching guide; defaults to ``cache_write_input_per_1m``, else
            ``input_per_1m``; a hosted model takes litellm's
            ``cache_creation_input_token_cost_above_1hr`` first).
        per_request: flat USD per call (used by replay backends whose data records
            a per-call cost rather than token prices).
        gpu_usd_per_hour, output_tokens_per_s, input_tokens_per_s: a self-hosted pool's
            cost and measured throughput (whole pool, tokens/s under load); the cost model
            derives USD per token from them (:func:`router.cost.gpu_pricing`).

    Every price is at most :data:`PRICE_MAX` and every throughput at least
    :data:`THROUGHPUT_MIN`, so that no request's cost overflows to infinity (a 1e308 price
    once priced a call at ``inf`` USD, which JSON cannot carry).
    """

    input_per_1m: Number = Field(default=0.0, ge=0, le=PRICE_MAX)
    output_per_1m: Number = Field(default=0.0, ge=0, le=PRICE_MAX)
    cached_input_per_1m: Number | None = Field(default=None, ge=0, le=PRICE_MAX)
    cache_write_input_per_1m: Number | None = Field(default=None, ge=0, le=PRICE_MAX)
    cache_write_1h_input_per_1m: Number | None = Field(default=None, ge=0, le=PRICE_MAX)
    per_request: Number = Field(default=0.0, ge=0, le=PRICE_MAX)
    gpu_usd_per_hour: Number | None = Field(default=None, gt=0, le=PRICE_MAX)
    output_tokens_per_s: Number | None = Field(default=None, ge=THROUGHPUT_MIN)
    input_tokens_per_s: Number | None = Field(default=None, ge=THROUGHPUT_MIN)

    @model_validator(mode="after")
    def _gpu_needs_throughput(self) -> "Pricing":
        if self.gpu_usd_per_hour is not None and self.output_tokens_per_s is None:
            raise ValueError("'gpu_usd_per_hour' needs the pool's measured 'output_tokens_per_s'")
        if self.gpu_usd_per_hour is not None and (self.input_per_1m or self.output_per_1m
                                                  or self.cached_input_per_1m is not None
                                                  or self.cache_write_input_per_1m is not None
                                                  or self.cache_write_1h_input_per_1m is not None):
            # router.cost.gpu_pricing derives both token prices and would drop these in silence.
            raise ValueError("set token prices ('input_per_1m', 'output_per_1m', 'cached_input_per_1m', "
                             "'cache_write_input_per_1m', 'cache_write_1h_input_per_1m') or GPU time "
                             "('gpu_usd_per_hour' with throughput), not both: the GPU pricing replaces the "
                             "token prices")
        return self


def pricing_notes(policy: "Policy") -> list[str]:
    """Advice on a valid policy: each ``vllm`` backend without ``pricing``, or whose ``pricing``
    does not price a whole call (:func:`router.cost.sets_base_price`: one token price, or cache
    prices only), is costed at $0 for what is unpriced (no price map covers self-hosted
    models), so it wins every route where it clears the bar."""
    from router.cost import sets_base_price

    return [f"backend '{b.name}' (vllm) has {'no pricing' if b.pricing is None else 'no price for every token'}: "
            "what is unpriced is costed at $0, and it wins every route where it clears the bar; give 'pricing: "
            "{gpu_usd_per_hour: ..., output_tokens_per_s: ...}' or both 'input_per_1m' and 'output_per_1m' "
            "('{input_per_1m: 0, output_per_1m: 0}' to say it is free)"
            for b in policy.backends if b.kind == "vllm" and not sets_base_price(b.pricing)]


def _endpoint(url: str) -> str:
    check_endpoint(url)
    return url


#: One replica base URL: checked item by item, so that every bad entry of a list gets its own
#: ``file:line endpoints[i]`` line (a model validator stopped at the first).
Endpoint = Annotated[str, AfterValidator(_endpoint)]


class BackendConfig(_Strict):
    """One backend: a model behind a transport.

    Attributes:
        name: unique name; clients may pin it as ``model``.
        kind: ``vllm`` (OpenAI-compatible replica pool), ``hosted`` (any litellm
            provider), ``fake`` (deterministic; behaviour from the model name:
            ``*-slow``, ``*-error-429``, ``*-error-500``, ``*-drop-mid-stream``) or
            ``replay`` (recorded answers from outcome data files).
        model: the model id sent upstream (litellm form ``provider/model`` for hosted).
        endpoints: replica base URLs ending in ``/v1`` (vllm).
        api_base, api_key: hosted provider overrides (use ``${ENV_VAR}``).
        pricing: USD prices; ``None`` takes litellm's bundled price map (hosted) or zero.
        quality: prior probability of a good answer in [0, 1], used by the baseline
            quality predictor until the classifier's ``quality`` head knows this model.
        quality_model: the model name the classifier's ``quality`` head was trained on
            that stands for this backend (defaults to ``model``).
        tags: free labels used by rules, e.g. ``self_hosted``.
        timeout_s: request timeout (seconds); for ``vllm`` it bounds a whole non-streaming
            call and the longest silence of a stream (time to first token, or between two
            chunks). connect_timeout_s bounds the connect.
        max_concurrency: requests the backend serves at once before they queue (for the
            live TTFT prediction of :mod:`router.live`); ``None``: no queueing modelled.
        context_tokens: the model's context window (tokens); a request whose estimated
            prompt tokens plus ``max_tokens`` exceed it is not sent there. ``None``: litellm's
            bundled ``max_input_tokens`` for hosted models, else unchecked.
        data: outcome data files (replay).
        options: per-kind settings, checked by the loader against the kind's typed model
            (:func:`backends.registry.options_model`): ``vllm``
            :class:`backends.vllm.options.PoolOptions`, ``fake``
            :class:`backends.registry.FakeOptions`, ``replay`` none; ``hosted``: extra
            keyword arguments passed to the provider call, unchecked.
        demo: marks a backend of the bundled demo policy in ``/v1/models``.
    """

    name: str = Field(pattern=NAME_PATTERN)
    kind: Literal["vllm", "hosted", "fake", "replay"]
    model: str = Field(min_length=1)
    endpoints: list[Endpoint] = Field(default_factory=list)
    api_base: str | None = None
    api_key: SecretStr | None = None
    pricing: Pricing | None = None
    quality: Number | None = Field(default=None, ge=0, le=1)
    quality_model: str | None = None
    tags: list[str] = Field(default_factory=list)
    timeout_s: Number = Field(default=600.0, gt=0)
    connect_timeout_s: Number = Field(default=5.0, gt=0)
    max_concurrency: Integer | None = Field(default=None, ge=1)
    context_tokens: Integer | None = Field(default=None, ge=1)
    data: list[Path] = Field(default_factory=list)
    options: dict[str, Any] = Field(default_factory=dict)
    demo: bool = False

    #: Fields that only some kinds read: set on another kind they would be ignored in silence.
    KIND_ONLY: ClassVar[dict[str, tuple[str, ...]]] = {
        "endpoints": ("vllm",), "api_base": ("hosted",), "api_key": ("hosted", "vllm"), "data": ("replay",)}

    @model_validator(mode="after")
    def _kind_fields(self) -> "BackendConfig":
        for name, kinds in self.KIND_ONLY.items():
            if getattr(self, name) not in (None, []) and self.kind not in kinds:
                raise ValueError(f"'{name}' applies to {' and '.join(kinds)} backends only; this backend is "
                                 f"kind {self.kind!r} and would ignore it")
        if self.kind == "vllm" and not self.endpoints:
            raise ValueError("a vllm backend needs at least one entry in 'endpoints'")
        if self.kind == "replay" and not self.data:
            raise ValueError("a replay backend needs at least one file in 'data'")
        if self.api_key is not None:
            check_one_authorization(self.endpoints)
        return self

    @field_validator("endpoints")
    @classmethod
    def _distinct_endpoints(cls, urls: list[str]) -> list[str]:
        check_distinct(urls)  # each was checked on its own (Endpoint)
        return urls


class RouteConfig(_Strict):
    """A route: what a client names as ``model`` to get routed.

    Attributes:
        name: the route name (``auto`` is the default route).
        backends: candidate backend names, in preference order for ties.
        quality_bar: see :class:`QualityBar`.
        on_no_candidate: when no candidate clears the bar: ``best_quality`` (send to
            the candidate with the highest predicted quality), ``cheapest`` or
            ``reject`` (HTTP 503).
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


class RuleConfig(_Strict):
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


class LimitsConfig(_Strict):
    """How rate limits and budgets behave.

    Attributes:
        on_unavailable: when the shared limiter state (Redis) cannot be reached:
            ``open`` admits the request unlimited (and logs and counts it), ``closed``
            answers 503 ``limits_unavailable``.
    """

    on_unavailable: Literal["open", "closed"] = "open"


class Policy(_Strict):
    """A whole routing policy (``version: 1``)."""

    version: Version
    default_route: str = "auto"
    backends: list[BackendConfig] = Field(min_length=1)
    routes: list[RouteConfig] = Field(min_length=1)
    rules: list[RuleConfig] = Field(default_factory=list)
    limits: LimitsConfig = LimitsConfig()
    rewrite: RewriteConfig = RewriteConfig()

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
