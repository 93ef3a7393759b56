"""Dispatch a decision to its backends, with fallback, and account for the outcome.

Fallback rule: on a retryable :class:`~backends.errors.BackendError` (connect error,
timeout, 429, 5xx, an upstream 401/403/404, a 400 ``context_length_exceeded``) *before the
first byte reached the client*, the next backend of the decision's order is tried. After a
``context_length_exceeded`` from a backend whose context window is known
(:func:`backends.catalog.resolve_context`), later backends whose known window is no larger are
skipped: the upstream counted the prompt, and it would not fit them either. A skipped
backend is not an attempt: the next candidate beyond the recorded fallbacks takes its place,
up to the route's ``max_attempts`` backends tried. For streams the gateway waits for the
first chunk before it sends the response head, so a failure before it still falls back;
after it, the stream ends with an OpenAI-style error event ``data: {"error": {...}}`` and
``data: [DONE]``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field

from backends.base import Backend
from backends.call import NO_CONTEXT, CallContext, CallReport
from backends.errors import BackendContextExceeded, BackendError
from backends.openai_shapes import estimate_tokens, prompt_text
from backends.pricing import cost_usd
from gateway import observability
from gateway.runtime import Runtime
from router.decision import Decision
from router.records import OutcomeRecord

log = logging.getLogger("mixroute.dispatch")


@dataclass
class Attempt:
    """Bookkeeping of one request's dispatch (times in seconds from ``perf_counter``).

    ``context`` goes to every backend tried beside the body; ``report`` is what the backend
    now answering reported (a fresh one per backend tried)."""

    decision: Decision
    endpoint: str
    context: CallContext = NO_CONTEXT
    report: CallReport = field(default_factory=CallReport)
    started: float = field(default_factory=time.perf_counter)
    tried: list[str] = field(default_factory=list)
    backend: Backend | None = None
    first_at: float | None = None

    def outcome(self, runtime: Runtime, *, status: str, http_status: int, usage: dict | None = None,
                error: BackendError | None = None, ttft: float | None = None,
                itl: float | None = None, streamed: bool = False, fallback_text: str = "") -> OutcomeRecord:
        """The request's outcome; cost and cache writes as the answering backend reported them
        (:attr:`report`), else priced from ``usage``."""
        usage = usage or {}
        tokens_in = int(usage.get("prompt_tokens") or 0)
        tokens_out = int(usage.get("completion_tokens") or 0)
        if not usage and fallback_text:
            # The upstream sent no usage: count with the documented chars/4 estimate.
            tokens_out = estimate_tokens(fallback_text)
        # A stream that broke after its first chunk was generated, and is billed, upstream.
        broke_mid_stream = status == "error" and streamed and self.first_at is not None
        if not usage and (status == "client_disconnected" or broke_mid_stream) and self.backend is not None:
            # The client left (or the upstream broke) before the usage arrived, but the prompt
            # reached the backend, which bills it: count it with the same estimate, so that
            # spend and budgets see abandoned and broken requests.
            tokens_in = estimate_tokens(prompt_text(self.endpoint, self.decision.body))
        cached = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
        name = self.backend.name if self.backend else None
        cost = 0.0
        if name and (status != "error" or broke_mid_stream):
            cost = call_cost(runtime, name, {"prompt_tokens": tokens_in, "completion_tokens": tokens_out,
                                             "prompt_tokens_details": {"cached_tokens": cached}}, self.report.cost_usd)
        failed = [n for n in self.tried if n != name or status == "error"]
        return OutcomeRecord(
            request_id=self.decision.record.request_id, backend=name,
            model=self.backend.model if self.backend else None, status=status, http_status=http_status,
            fallbacks_taken=failed, error_code=error.code if error else None, ttft_s=ttft, itl_s=itl,
            latency_s=time.perf_counter() - self.started, tokens_in=tokens_in, tokens_out=tokens_out,
            tokens_cached=cached, cost_usd=cost, streamed=streamed,
            tokens_cache_write=self.report.cache_write_tokens,
            tokens_cache_write_1h=self.report.cache_write_tokens_1h,
        )


def prompt_estimate(attempt: Attempt) -> int:
    """The prompt tokens of the attempt's request, estimated (chars/4) for an upstream that sent no usage."""
    return estimate_tokens(prompt_text(attempt.endpoint, attempt.decision.body))


def call_cost(runtime: Runtime, backend: str, usage: dict, recorded: float | None) -> float:
    """USD cost of one call: the backend's recorded cost when it gave one, else priced from
    ``usage`` (OpenAI usage object) with the backend's prices (:func:`backends.pricing.cost_usd`)."""
    if recorded is not None:
        return float(recorded)
    details = usage.get("prompt_tokens_details") or {}
    return cost_usd(runtime.router.pricing[backend], int(usage.get("prompt_tokens") or 0),
                    int(usage.get("completion_tokens") or 0), int(details.get("cached_tokens") or 0))


def _body_for(backend: Backend, body: dict, stream: bool, cap: int | None = None) -> dict:
    """The body sent to ``backend``: its model, the stream flags, and ``cap`` (a hard cost
    limit's output-token limit, :meth:`router.decision.Decision.token_cap`) in place of a
    larger client limit: in each of ``max_tokens`` and ``max_completion_tokens`` the client
    sent (a smaller one stays), else in ``max_tokens``."""
    out = {**body, "model": backend.model}
    if cap is not None:
        sent = [f for f in ("max_tokens", "max_completion_tokens") if body.get(f) is not None]
        for f in sent or ["max_tokens"]:
            value = body.get(f)
            out[f] = min(value, cap) if isinstance(value, int) and not isinstance(value, bool) else cap
    if stream:
        out["stream"] = True
        out["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
    else:
        out.pop("stream", None)
        out.pop("stream_options", None)
    return out


async def send(runtime: Runtime, attempt: Attempt, body: dict) -> dict:
    """Non-streaming dispatch with fallback.

    Returns:
        The backend's response dict (what it reported beside it: ``attempt.report``).

    Raises:
        BackendError: the last failure when every backend failed (or a non-retryable one).
    """
    last: BackendError | None = None
    failures: list[tuple[str, str]] = []
    skipped: list[tuple[str, str]] = []
    for name in _to_try(runtime, attempt, failures, skipped):
        backend = _begin(runtime, attempt, name)
        try:
            sent = _body_for(backend, body, stream=False, cap=attempt.decision.token_cap(name))
            response = await observability.send(backend, attempt.endpoint, sent, context=attempt.context,
                                                report=attempt.report)
            attempt.decision.answered_by(name)
            return response
        except BackendError as exc:
            last = exc
        except Exception as exc:  # a bug in a backend adapter: log it, fall back, record the outcome
            last = _adapter_error(name, exc)
        if not _failed(runtime, name, last, failures, _more(attempt, name)):
            break
    assert last is not None
    raise _all_failed(last, failures, skipped, attempt.endpoint)


async def open_stream(runtime: Runtime, attempt: Attempt, body: dict) -> tuple[dict, AsyncIterator[dict]]:
    """Start a stream with fallback: returns the first chunk and the live iterator.

    Raises:
        BackendError: every backend failed before its first chunk.
    """
    last: BackendError | None = None
    failures: list[tuple[str, str]] = []
    skipped: list[tuple[str, str]] = []
    for name in _to_try(runtime, attempt, failures, skipped):
        backend = _begin(runtime, attempt, name)
        chunks = backend.stream(attempt.endpoint, _body_for(backend, body, stream=True,
                                                           cap=attempt.decision.token_cap(name)),
                                context=attempt.context, report=attempt.report)
        try:
            first = await observability.first_chunk(backend, attempt.endpoint, body, chunks)
            attempt.first_at = time.perf_counter()
            attempt.decision.answered_by(name)
            return first, chunks
        except StopAsyncIteration:
            last = BackendError(f"{name}: the upstream sent an empty stream", backend=name)
        except BackendError as exc:
            last = exc
        except Exception as exc:  # a bug in a backend adapter: log it, fall back, record the outcome
            last = _adapter_error(name, exc)
        await chunks.aclose()
        if not _failed(runtime, name, last, failures, _more(attempt, name)):
            break
    assert last is not None
    raise _all_failed(last, failures, skipped, attempt.endpoint)


def _begin(runtime: Runtime, attempt: Attempt, name: str) -> Backend:
    """Start an attempt on backend ``name``: record it as tried and in flight."""
    backend = runtime.backends[name]
    attempt.backend = backend
    attempt.report = CallReport()
    attempt.tried.append(name)
    runtime.router.live.started(name)
    return backend


def _to_try(runtime: Runtime, attempt: Attempt, failures: list[tuple[str, str]],
            skipped: list[tuple[str, str]]) -> Iterator[str]:
    """The backends to try, in :attr:`Decision.dispatch_order`, until :attr:`Decision.attempts`
    of them were tried (:func:`_begin` counts them), leaving out each whose context window is
    too small (:func:`_too_small`; added to ``skipped`` with the reason, and logged)."""
    for name in attempt.decision.dispatch_order:
        if len(attempt.tried) >= attempt.decision.attempts:
            return
        why = _too_small(runtime, name, failures)
        if why is None:
            yield name
        else:
            skipped.append((name, why))
            log.info("backend %s %s", name, why)


def _more(attempt: Attempt, name: str) -> bool:
    """Whether dispatch may go on after backend ``name`` failed (for the log line)."""
    return len(attempt.tried) < attempt.decision.attempts and name != attempt.decision.dispatch_order[-1]


def _too_small(runtime: Runtime, name: str, failures: list[tuple[str, str]]) -> str | None:
    """Why backend ``name`` is not tried, or ``None``: a backend already tried rejected the
    prompt as longer than its known context window, and ``name``'s known window (tokens) is
    no larger. A backend whose window is unknown is always tried."""
    context = runtime.router.context
    windows = [context.get(n) for n, code in failures if code == BackendContextExceeded.code]
    exceeded = max((w for w in windows if w is not None), default=None)
    mine = context.get(name)
    if exceeded is None or mine is None or mine > exceeded:
        return None
    return f"not tried: its {mine}-token context window is no larger than {exceeded}"


def _adapter_error(name: str, exc: Exception) -> BackendError:
    """An unexpected exception raised by backend ``name`` (a bug, not an upstream answer) as
    a retryable :class:`BackendError`: the request falls back and its outcome is recorded,
    and the traceback is logged once here."""
    log.exception("backend %s raised an unexpected %s", name, type(exc).__name__)
    return BackendError(f"{name}: internal error in the backend adapter ({type(exc).__name__})", backend=name)


def _failed(runtime: Runtime, name: str, exc: BackendError, failures: list[tuple[str, str]],
            more: bool = True) -> bool:
    """Record a failed attempt before the first byte; whether to fall back to the next
    backend (``more``: there is one, for the log line)."""
    failures.append((name, exc.code))
    runtime.router.live.finished(name, ttft_s=None, latency_s=None)
    log.warning("backend %s failed before the first byte (%s); %s", name, exc.code,
                "falling back" if exc.retryable and more else "giving up")
    return exc.retryable


def _all_failed(last: BackendError, failures: list[tuple[str, str]], skipped: list[tuple[str, str]],
                endpoint: str) -> BackendError:
    """``last`` with a message naming every backend tried (and skipped), when more than one
    was; a ``context_length_exceeded`` whose upstream named no ``param`` (vLLM's does not)
    blames the field that holds the prompt, as OpenAI's does."""
    if isinstance(last, BackendContextExceeded) and last.param is None:
        last.param = {"completions": "prompt", "embeddings": "input"}.get(endpoint, "messages")
    if len(failures) + len(skipped) > 1:
        tried = ", ".join(f"{name} ({code})" for name, code in failures)
        head = f"All {len(failures)} backends tried failed: {tried}" if len(failures) > 1 else f"Backend {tried}"
        rest = "; " + ", ".join(f"{name} ({why})" for name, why in skipped) if skipped else ""
        last.message = f"{head}{rest}. Last error: {last.message}"
    return last
