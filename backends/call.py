"""What travels beside a request to a backend, and what comes back beside its answer.

The client's body reaches a backend as the client (and the rewriter) wrote it. What the
gateway and the router know about the call, and what a backend knows about it that an
OpenAI answer cannot say, travel in these two typed objects instead of private keys inside
the body or the answer:

- :class:`CallContext` (in): the cache scope (tenant and stable-prefix hash), which the
  hosted backend turns into OpenAI's ``prompt_cache_key``; the session and the replica its
  last turn used, which a vLLM pool keeps the session on (:mod:`backends.vllm.affinity`);
  the request id, for logs.
- :class:`CallReport` (out): filled by the backend while it answers (before it returns, or
  before it yields a stream's usage chunk): the call's real cost when the backend knows it
  (a replay's recorded cost; a hosted call whose prompt-cache writes the OpenAI usage object
  cannot express), the prompt-cache writes the provider reported, and the replica that
  answered.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CallContext:
    """What the caller passes beside a request's body.

    Attributes:
        tenant: the caller's tenant (``None``: auth off); scopes cache keys.
        prefix_hash: hash of the request's stable prefix (system prompt and tools,
            :func:`router.rewrite.prefix_hash`), ``None`` when unknown.
        session_id: the conversation the request belongs to, already scoped to its tenant
            and route by the gateway (never a client's raw id); ``None``: no session.
        session_replica: the replica (:attr:`CallReport.replica`) that answered the
            session's last turn, as the shared session state remembers it.
        request_id: the gateway's request id.
    """

    tenant: str | None = None
    prefix_hash: str | None = None
    session_id: str | None = None
    session_replica: str | None = None
    request_id: str | None = None


NO_CONTEXT = CallContext()
"""The context of a call made outside the gateway (tests, the replay command)."""


@dataclass
class CallReport:
    """What a backend reports beside its answer; each field stays ``None`` when unknown.

    Attributes:
        cost_usd: the real cost of the call (USD) when the backend knows it better than
            the OpenAI usage priced at the backend's prices would say; the gateway records
            it as the call's cost.
        cache_write_tokens: prompt tokens the provider wrote to its prompt cache (tokens;
            Anthropic's ``cache_creation_input_tokens``), for the outcome row.
        cache_write_tokens_1h: the part of them written to the 1-hour cache (tokens).
        replica: the replica that answered (its URL without user info), for a pool.
    """

    cost_usd: float | None = None
    cache_write_tokens: int | None = None
    cache_write_tokens_1h: int | None = None
    replica: str | None = None

    def cache_write(self, tokens: int, tokens_1h: int) -> None:
        """Record the provider's prompt-cache writes (tokens)."""
        self.cache_write_tokens, self.cache_write_tokens_1h = tokens, tokens_1h
