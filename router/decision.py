"""What the decision engine (:mod:`router.engine`) decides on and returns: the
:class:`RoutingRequest` it reads, each :class:`Candidate`'s scores and the
:class:`Decision` with its record, candidates and the order dispatch tries backends in.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from backends.call import CallContext
from router.records import DecisionRecord
from router.session import SessionState


@dataclass
class Candidate:
    """One candidate's scores. Costs in USD, tokens in tokens."""

    backend: str
    model: str
    predicted_quality: float | None
    expected_cost_usd: float
    expected_output_tokens: int
    expected_cached_tokens: int = 0
    predicted_ttft_s: float | None = None
    eligible: bool = False
    meets_slo: bool = True
    note: str = ""
    #: ``willingness_to_pay x predicted quality - expected cost`` (USD), under a
    #: ``willingness_to_pay`` bar only: the engine picks the largest.
    utility_usd: float | None = None
    #: Posterior standard deviation of ``predicted_quality`` (``None``: none known).
    quality_sd: float | None = None
    #: ``predicted_quality - uncertainty_z x quality_sd`` (at least 0), under a
    #: ``route_target`` bar only: the value the bar and the route's share are held on.
    quality_bound: float | None = None
    #: The most the request can cost here (USD): its ``max_tokens`` (or
    #: ``max_completion_tokens``) for every completion it asks for; ``None`` without one.
    #: Budgets and ``--tpm`` reserve it instead of the expected cost and tokens.
    cost_ceiling_usd: float | None = None
    #: Output tokens of that ceiling (``max_tokens`` x completions); ``None`` without one.
    output_tokens_ceiling: int | None = None
    #: The output-token limit per completion that dispatch sends this backend in place of
    #: the client's (lower) so that the call stays within a rule's hard cost limit
    #: (``max_cost_mode: hard``); ``None``: the client's limit stands.
    output_token_cap: int | None = None


@dataclass
class Decision:
    """A routing decision; ``record`` is what the store keeps."""

    record: DecisionRecord
    body: dict
    candidates: list[Candidate] = field(default_factory=list)
    bar: float | None = None
    #: Candidates after the recorded fallbacks, in the same order: dispatch reaches them only
    #: when it skips a fallback without trying it (one whose context window is too small), so
    #: that ``attempts`` backends can still be tried.
    reserve: list[str] = field(default_factory=list)
    #: Told which backend answered when it was not the first choice (a ``route_target``
    #: route's controller then counts the fallback's predicted quality).
    on_fallback: Callable[[str], None] | None = field(default=None, repr=False)

    def token_cap(self, backend: str) -> int | None:
        """The output-token limit dispatch sends ``backend`` in place of the client's
        (:attr:`Candidate.output_token_cap`), or ``None``."""
        for c in self.candidates:
            if c.backend == backend:
                return c.output_token_cap
        return None

    @property
    def order(self) -> list[str]:
        """Backends to try, in order: the choice then the fallbacks."""
        return [self.record.chosen, *self.record.fallbacks]

    @property
    def attempts(self) -> int:
        """Backends dispatch may try for this request: as many as :attr:`order` holds (the
        route's ``max_attempts`` whenever a :attr:`reserve` is left over)."""
        return len(self.order)

    @property
    def dispatch_order(self) -> list[str]:
        """:attr:`order`, then the :attr:`reserve` a skipped fallback makes room for."""
        return [*self.order, *self.reserve]

    def call_context(self, session_id: str | None = None, session_replica: str | None = None) -> CallContext:
        """What dispatch passes each backend beside the body: the cache scope (the tenant and
        the stable-prefix hash of :attr:`record`), the request id, and the session, if any."""
        rec = self.record
        return CallContext(tenant=rec.tenant, prefix_hash=rec.prefix_hash, session_id=session_id,
                           session_replica=session_replica, request_id=rec.request_id)

    def answered_by(self, backend: str) -> None:
        """Report that ``backend`` gave the answer (dispatch calls this after a fallback)."""
        if self.on_fallback is not None and backend != self.record.chosen:
            self.on_fallback(backend)


def new_request_id() -> str:
    """A new request id: ``mr-`` and 32 hex digits."""
    return f"mr-{uuid.uuid4().hex}"


@dataclass
class RoutingRequest:
    """What the engine needs from an HTTP request.

    Attributes:
        endpoint: ``chat`` or ``completions``.
        body: the validated OpenAI request body (``model`` = route or backend name).
        tenant: tenant name when authenticated.
        headers: lower-cased request headers that rules may match (``x-mixroute-*``).
        admin: the caller holds the admin key (may force a backend with the
            ``x-mixroute-backend-override`` header).
        span: optional tracing hook: ``span(name)`` returns a context manager around a step
            (the gateway passes its OpenTelemetry tracer's; ``None``: no tracing).
        dry_run: decide without changing live state (``POST /v1/route``): a ``route_target``
            route's window does not see the request.
        session: the conversation this request continues (:mod:`router.session`), looked up
            by the gateway; ``None``: decided alone.
    """

    endpoint: str
    body: dict
    tenant: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    admin: bool = False
    request_id: str = field(default_factory=lambda: new_request_id())
    span: Callable[[str], AbstractContextManager] | None = None
    dry_run: bool = False
    session: SessionState | None = None


def candidate_dict(c: Candidate) -> dict[str, Any]:
    """JSON-ready view of a candidate (used by ``/v1/route``)."""
    return vars(c).copy()
