"""The backends' configuration models: a backend's policy entry (:class:`BackendConfig`) and
its prices (:class:`Pricing`), validated like the rest of the policy (``extra="forbid"``;
:mod:`backends.fields`). They stand on the floor because the backends are built from them
and the pricing maths (:mod:`backends.pricing`) reads them; the routing policy
(:class:`router.policy.models.Policy`) lists them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, Field, SecretStr, field_validator, model_validator

from backends.endpoints import check_distinct, check_endpoint, check_one_authorization
from backends.fields import NAME_PATTERN, Integer, Number, Strict

#: Largest accepted price (USD per 1M tokens, per request or per GPU hour): far above any
#: real one, far below where a request's cost could overflow a float.
PRICE_MAX = 1_000_000.0
#: Smallest accepted measured throughput of a self-hosted pool (tokens/s).
THROUGHPUT_MIN = 0.001


class Pricing(Strict):
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
            derives USD per token from them (:func:`backends.pricing.gpu_pricing`).

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
            # backends.pricing.gpu_pricing derives both token prices and would drop these in silence.
            raise ValueError("set token prices ('input_per_1m', 'output_per_1m', 'cached_input_per_1m', "
                             "'cache_write_input_per_1m', 'cache_write_1h_input_per_1m') or GPU time "
                             "('gpu_usd_per_hour' with throughput), not both: the GPU pricing replaces the "
                             "token prices")
        return self


def _endpoint(url: str) -> str:
    check_endpoint(url)
    return url


#: One replica base URL: checked item by item, so that every bad entry of a list gets its own
#: ``file:line endpoints[i]`` line (a model validator stopped at the first).
Endpoint = Annotated[str, AfterValidator(_endpoint)]


class BackendConfig(Strict):
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
        task: what the backend serves: ``chat`` (``/v1/chat/completions`` and
            ``/v1/completions``) or ``embedding`` (``/v1/embeddings``); a route's backends all
            serve one task (:mod:`router.policy.tasks`).
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
    task: Literal["chat", "embedding"] = "chat"

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
