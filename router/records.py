"""The two records mixroute keeps per request, written separately (see ARCHITECTURE.md):
a :class:`DecisionRecord` before dispatch and an :class:`OutcomeRecord` after the last
byte. Both are keyed by ``request_id``; feedback joins on it later.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


#: ``endpoint`` (and ``reason``) of the decision row of a Messages ``count_tokens`` request:
#: answered and recorded, but nothing was routed, dispatched or billed.
COUNT_TOKENS = "count_tokens"


@dataclass
class DecisionRecord:
    """What the router decided, and why.

    Attributes:
        request_id: ``x-mixroute-request-id`` of the request.
        route: the route name, or the backend name when pinned.
        policy_hash: hash of the policy that decided (see ``router.policy.loader.policy_hash``).
        chosen: backend name chosen first.
        reason: stable reason code (``cheapest_above_bar``, ``pinned``, ...).
        candidates: one dict per candidate: ``backend``, ``model``, ``predicted_quality``
            (probability), ``expected_cost_usd`` (USD), ``expected_output_tokens``
            (tokens), ``eligible`` (bool), ``meets_slo`` (bool), ``predicted_ttft_s``
            (seconds), ``note`` (what counts against it: quality under the bar, predicted
            TTFT over the SLO; empty when nothing does), and the bar's own fields.
        fallbacks: ranked backend names to try after ``chosen``.
        probability: selection probability of ``chosen`` (1.0 for a deterministic policy).
        signals: classifier signals (domain, difficulty, pii, ...) and the decision's own
            (``bar``, ``rules`` applied, ``too_long_for``: the route's backends left out
            because the request exceeds their context window), JSON-serialisable.
        tenant: tenant name, ``None`` when auth is off.
        key_id: id of the API key that sent the request (``mixroute keys list``), ``None``
            when auth is off and for the admin key.
        endpoint: ``chat``, ``completions``, ``embeddings`` or :data:`COUNT_TOKENS`.
        pinned: the client named a backend directly.
        prefix_hash: hash of the rewritten request's stable prefix.
        created_at: UTC time of the decision.
        adapter_version: the adapter version (classifier heads and outcome correction,
            :mod:`router.learning.versions`) of the router that decided; ``None`` for a
            request refused before the router decided.
    """

    request_id: str
    route: str
    policy_hash: str
    chosen: str
    reason: str
    candidates: list[dict[str, Any]]
    fallbacks: list[str] = field(default_factory=list)
    probability: float = 1.0
    signals: dict[str, Any] = field(default_factory=dict)
    tenant: str | None = None
    endpoint: str = "chat"
    pinned: bool = False
    prefix_hash: str | None = None
    created_at: datetime = field(default_factory=utcnow)
    key_id: str | None = None
    adapter_version: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class OutcomeRecord:
    """What actually happened.

    Attributes:
        request_id: joins the decision.
        backend: backend that produced the answer (or the last one tried on failure).
        model: model id that answered.
        fallbacks_taken: backends tried and failed before ``backend``, in order.
        status: ``ok``, ``error`` or ``client_disconnected``.
        http_status: status sent to the client (200 for streams that broke mid-way; 499,
            nginx's "client closed request", when the client left before the answer
            started: the backend call was cancelled and nothing was sent).
        error_code: stable error code, ``None`` on success.
        ttft_s: time to first token (seconds; for non-streaming, time to the full answer).
        itl_s: mean inter-token latency over stream chunks (seconds), ``None`` if not streamed.
        latency_s: total time from request to last byte (seconds).
        tokens_in, tokens_out, tokens_cached: prompt, completion and prefix-cached prompt tokens.
        tokens_cache_write: prompt tokens the provider wrote to its prompt cache (part of
            ``tokens_in``; Anthropic's ``cache_creation_input_tokens``), ``None`` when the
            backend does not report cache writes (vLLM, OpenAI) or no usage arrived.
        tokens_cache_write_1h: the part of ``tokens_cache_write`` written to a 1-hour cache
            (tokens; 0 when the provider did not split its writes by lifetime), ``None``
            exactly when ``tokens_cache_write`` is.
        cost_usd: cost of the call in USD.
        streamed: whether the response was streamed.
        usage_estimated: the upstream sent no usage, so ``tokens_in`` and ``tokens_out`` are
            the gateway's own count (:func:`backends.openai_shapes.estimate_tokens` of the
            prompt and of the text it relayed) and ``cost_usd`` is priced from them.
        created_at: UTC time the outcome was recorded.
    """

    request_id: str
    backend: str | None
    model: str | None
    status: str
    http_status: int
    fallbacks_taken: list[str] = field(default_factory=list)
    error_code: str | None = None
    ttft_s: float | None = None
    itl_s: float | None = None
    latency_s: float | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    tokens_cached: int = 0
    tokens_cache_write: int | None = None
    tokens_cache_write_1h: int | None = None
    cost_usd: float = 0.0
    streamed: bool = False
    usage_estimated: bool = False
    created_at: datetime = field(default_factory=utcnow)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
