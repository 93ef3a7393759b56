"""``POST /v1/chat/completions``, ``POST /v1/completions`` and ``POST /v1/route``.

Each completion request: parse -> decide (decision row queued) -> dispatch with fallback
-> response with ``x-mixroute-*`` headers -> outcome row queued after the last byte.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from fastapi import APIRouter, Request
from starlette.responses import Response, StreamingResponse

from backends.call import CallContext
from backends.errors import BackendError
from gateway import dispatch, observability
from gateway.api.deps import hot_path_deps
from gateway.doors.base import Door, DoorCall, DoorContext, Rendered, StreamEncoder
from gateway.doors.chat import CHAT, COMPLETIONS
from gateway.doors.dialects import door_for
from gateway.auth.guard import OPEN, PermissionDenied, Principal
from gateway.limits.admission import Admission, admit
from gateway.openapi import one_of, request_body
from gateway.request_body import read_json, refuse_cross_site
from gateway.responses import FastJSONResponse
from gateway.runtime import Runtime
from gateway.sessions import Ticket
from gateway.schemas import ChatCompletionRequest, CompletionRequest, validate
from router.decision import Decision, RoutingRequest, candidate_dict, new_request_id
from router.engine import OVERRIDE_HEADER, REFUSALS
from router.errors import MixrouteError, RequestRejected
from router.records import DecisionRecord, OutcomeRecord

router = APIRouter()

_SCHEMAS = {"chat": ChatCompletionRequest, "completions": CompletionRequest}


async def _read(request: Request, settings, principal: Principal) -> dict:
    """The request's JSON object (size-capped); without auth, a cross-site form post is refused first."""
    if principal is OPEN:
        refuse_cross_site(request.headers.get("content-type"))
    return await read_json(request, settings.max_body_bytes)


async def _decide(request: Request, runtime: Runtime, settings, endpoint: str, principal: Principal,
                  request_id: str | None = None, dry_run: bool = False,
                  raw: dict | None = None, door: str | None = None,
                  session: Ticket | None = None) -> tuple[Decision, dict]:
    if raw is None:
        raw = await _read(request, settings, principal)
    # The embeddings door checked its body itself (gateway.doors.embeddings.check_body).
    body = validate(_SCHEMAS[endpoint], raw) if endpoint in _SCHEMAS else raw
    body.setdefault("model", runtime.loaded.policy.default_route)
    principal.check_model(body["model"])
    wanted = runtime.rule_headers
    headers = {k: v for k, v in request.headers.items() if k.startswith("x-mixroute-") or k in wanted}
    if OVERRIDE_HEADER in headers and not principal.admin:
        # Silently routing as usual would let a client believe its override took effect.
        raise PermissionDenied(f"{OVERRIDE_HEADER} needs the admin key (MIXROUTE_ADMIN_KEY)",
                               param=OVERRIDE_HEADER, code="override_not_allowed")
    req = RoutingRequest(endpoint=endpoint, body=body, tenant=principal.tenant, headers=headers,
                         admin=principal.admin, dry_run=dry_run, session=session.state if session else None)
    if request_id:
        req.request_id = request_id
    decision = await observability.decide(runtime.router, req)
    if door is not None and door != endpoint:
        decision.record.signals["door"] = door
    return decision, body


def _record_refusal(store, runtime: Runtime, request_id: str, endpoint: str, principal: Principal,
                    exc: MixrouteError, decision: Decision | None = None) -> None:
    # The engine's own record of a refusal (route or pinned backend, signals, scored candidates);
    # the minimal one is for a refusal raised elsewhere.
    rec = decision.record if decision is not None else getattr(exc, "record", None) or DecisionRecord(
        request_id=request_id, route="", policy_hash=runtime.loaded.hash, chosen="", reason=exc.code,
        candidates=[], tenant=principal.tenant, endpoint=endpoint)
    rec.key_id = _key_id(principal)
    store.record_decision(rec)
    # Through the finisher, so the refusal is counted in mixroute_requests_total{status="rejected"}
    # like every other outcome row.
    observability.finisher(rec, store.record_outcome)(OutcomeRecord(
        request_id=request_id, backend=None, model=None, status="rejected", http_status=exc.status,
        error_code=exc.code))
    exc.headers = {**getattr(exc, "headers", {}), "x-mixroute-request-id": request_id}


def _key_id(principal: Principal) -> str | None:
    """The id of the API key behind a request (``None``: auth off, or the admin key)."""
    return principal.key.key_id if principal.key is not None else None


CLIENT_CLOSED = 499
"""Outcome status of a request whose client left before the answer started (nginx's
"client closed request"); nothing is sent."""


class ClientGone(Exception):
    """The client disconnected while the gateway waited for a backend."""


async def _unless_client_leaves(request: Request, work: Awaitable):
    """Await ``work`` (a backend call); if the client disconnects first, cancel it, which
    closes the upstream connection so that the replica stops generating (vLLM aborts a
    request whose connection closes), and raise :class:`ClientGone`. Once a stream has
    started, Starlette's ``StreamingResponse`` watches for the disconnect itself.

    Raises:
        ClientGone: the client left first.
    """
    task = asyncio.current_task()
    watcher = asyncio.get_running_loop().create_task(_cancel_on_disconnect(request, task))
    try:
        return await work
    except asyncio.CancelledError:
        if watcher.done() and not watcher.cancelled() and watcher.result():
            task.uncancel()
            raise ClientGone from None
        raise
    finally:
        watcher.cancel()


async def _cancel_on_disconnect(request: Request, task: asyncio.Task) -> bool:
    # The body was read already: the next ASGI message is the disconnect (uvicorn sends it
    # when the connection closes).
    while (await request.receive())["type"] != "http.disconnect":
        pass
    task.cancel()
    return True


def _error_response(exc: BackendError, decision: Decision, attempt: dispatch.Attempt,
                    limit_headers: dict[str, str], door: Door) -> FastJSONResponse:
    """The door's envelope of the last backend error, with its own headers (an upstream's
    ``retry-after``), the key's ``x-ratelimit-*`` ones and the ``x-mixroute-*`` ones."""
    headers = {**(getattr(exc, "headers", None) or {}), **limit_headers,
               **_headers(decision, attempt.backend.name if attempt.backend else None)}
    body = door.error_body(exc.status, exc.message, exc.type, exc.code, exc.param)
    return FastJSONResponse(body, status_code=exc.status, headers=headers)


def _headers(decision: Decision, backend: str | None, tried: list[str] | None = None) -> dict[str, str]:
    """Response headers; ``x-mixroute-fallbacks`` lists the backends that failed before ``backend``."""
    rec = decision.record
    headers = {"x-mixroute-request-id": rec.request_id, "x-mixroute-route": rec.route,
               "x-mixroute-backend": backend or "", "x-mixroute-reason": rec.reason}
    failed = [name for name in tried or () if name != backend]
    if failed:
        headers["x-mixroute-fallbacks"] = ",".join(failed)
    return headers


# The three endpoints below resolve runtime, settings and principal with one plain call
# (hot_path_deps) instead of FastAPI ``Depends``: dependency resolution was one of the largest
# items in a profile of the pass-through path (docs/BENCHMARKS.md, "Hot path").


@router.post("/v1/chat/completions", openapi_extra=request_body(ChatCompletionRequest))
async def chat_completions(request: Request):
    runtime, settings, principal = await hot_path_deps(request)
    return await complete(request, runtime, settings, principal, CHAT)


@router.post("/v1/completions", openapi_extra=request_body(CompletionRequest))
async def completions(request: Request):
    runtime, settings, principal = await hot_path_deps(request)
    return await complete(request, runtime, settings, principal, COMPLETIONS)


@router.post("/v1/route", openapi_extra=one_of(ChatCompletionRequest, CompletionRequest))
async def route(request: Request):
    """Dry run: the decision and the rewritten request, without dispatching or storing. The
    body is a request of any door's dialect (chat, legacy completions, Responses, Anthropic
    Messages; :func:`gateway.doors.dialects.door_for`, ``?dialect=`` to say it), parsed
    and validated as its door would; the answer's ``dialect`` names the one parsed."""
    runtime, settings, principal = await hot_path_deps(request, records=False)
    raw = await _read(request, settings, principal)
    door = door_for(raw, request.headers, request.query_params.get("dialect"))
    ctx = DoorContext(request=request, runtime=runtime, settings=settings, principal=principal,
                      store=request.app.state.store)
    call = await door.parse(raw, ctx)
    endpoint = call.endpoint
    try:
        ticket = await _open_session(request, runtime, principal, endpoint, call.body, call)
        decision, _ = await _decide(request, runtime, settings, endpoint, principal, dry_run=True, raw=call.body,
                                    door=door.name, session=ticket)
    except REFUSALS as exc:
        # The same error a real request gets, with what the engine saw: which candidates it
        # scored against which bar, and the signals the rules read.
        refused = getattr(exc, "record", None)
        if refused is not None:
            exc.envelope_extra = {"mixroute": {
                "route": refused.route, "reason": refused.reason, "pinned": refused.pinned,
                "quality_bar": refused.signals.get("bar"), "candidates": refused.candidates,
                "signals": refused.signals}}
            exc.headers = {**getattr(exc, "headers", {}), "x-mixroute-request-id": refused.request_id}
        raise
    rec = decision.record
    replica, replica_reason = _replica_preview(runtime, rec.chosen, decision.body, _call_context(decision, ticket))
    if principal.tenant is not None and not principal.admin:
        replica = None  # internal addresses are for the operator; a tenant's key sees the reason only
    return FastJSONResponse({
        "request_id": rec.request_id, "dialect": door.name, "endpoint": endpoint, "route": rec.route,
        "policy_hash": rec.policy_hash, "adapter_version": rec.adapter_version,
        "chosen": rec.chosen, "fallbacks": rec.fallbacks, "reason": rec.reason, "pinned": rec.pinned,
        "quality_bar": decision.bar, "probability": rec.probability,
        "candidates": [candidate_dict(c) for c in decision.candidates], "signals": rec.signals,
        "prefix_hash": rec.prefix_hash, "rewrite": rec.signals.get("rewrite"),
        "rewritten_request": decision.body,
        "replica": replica, "replica_reason": replica_reason,
    })


def _replica_preview(runtime: Runtime, chosen: str | None, body: dict,
                     context: CallContext) -> tuple[str | None, str | None]:
    """The replica (and the chooser's reason) the chosen backend's pool would pick for
    ``body`` now, changing no state; ``(None, None)`` for backends without replicas."""
    preview = getattr(runtime.backends.get(chosen or ""), "preview_replica", None)
    found = preview(body, context) if preview is not None else None
    return found if found is not None else (None, None)


def _call_context(decision: Decision, ticket: Ticket | None) -> CallContext:
    """What each backend gets beside the body: the decision's cache scope and the session
    (its tenant-scoped key, and the replica its last turn used)."""
    if ticket is None:
        return decision.call_context()
    return decision.call_context(session_id=ticket.key, session_replica=ticket.state.replica)


async def complete(request: Request, runtime: Runtime, settings, principal: Principal, door: Door,
                   raw: dict | None = None):
    """The shared pipeline of every generation door: parse the dialect into the canonical
    request, decide (decision row), admit (limits), dispatch with fallback, render the answer
    in the door's dialect, record the outcome after the last byte."""
    state = request.app.state
    request_id = new_request_id()
    ctx = DoorContext(request=request, runtime=runtime, settings=settings, principal=principal, store=state.store)
    try:
        if raw is None:
            raw = await _read(request, settings, principal)
        call = await door.parse(raw, ctx)
        ticket = await _open_session(request, runtime, principal, call.endpoint, call.body, call)
        decision, body = await _decide(request, runtime, settings, call.endpoint, principal, request_id,
                                       raw=call.body, door=door.name, session=ticket)
    except REFUSALS as exc:  # recorded: a decision with no choice and a 'rejected' outcome
        _record_refusal(state.store, runtime, request_id, door.name, principal, exc)
        raise
    decision.record.key_id = _key_id(principal)
    try:
        policy = runtime.loaded.policy
        admission = await admit(state.limiter, principal, decision, policy.limits.on_unavailable,
                                state.runaway.check(policy.runaway))
    except RequestRejected as exc:
        _record_refusal(state.store, runtime, request_id, door.name, principal, exc, decision)
        raise
    observability.record_decision(state.store, decision.record)
    limit_headers = admission.headers()
    attempt = dispatch.Attempt(decision=decision, endpoint=call.endpoint, context=_call_context(decision, ticket))
    finish = observability.finisher(decision.record, _finisher(state.store, admission, runtime.router.live, decision.record.prefix_hash))
    if body.get("stream"):
        return await _stream(request, runtime, finish, attempt, decision.body, limit_headers, door, call, ctx, ticket)
    try:
        resp = await _unless_client_leaves(request, dispatch.send(runtime, attempt, decision.body))
    except ClientGone:
        finish(attempt.outcome(runtime, status="client_disconnected", http_status=CLIENT_CLOSED))
        return Response(status_code=CLIENT_CLOSED)  # nobody reads it
    except BackendError as exc:
        finish(attempt.outcome(runtime, status="error", http_status=exc.status, error=exc))
        return _error_response(exc, decision, attempt, limit_headers, door)
    resp.setdefault("model", attempt.backend.model)
    elapsed = time.perf_counter() - attempt.started
    outcome = attempt.outcome(runtime, status="ok", http_status=200, usage=resp.get("usage"), ttft=elapsed,
                              fallback_text=dispatch.answer_text(resp))
    call.report = attempt.report
    rendered = door.render(resp, call, Rendered(request_id=request_id, backend=attempt.backend.name,
                                                model=attempt.backend.model, cost_usd=outcome.cost_usd))
    try:
        await door.after(call, rendered, ctx)
        if ticket is not None:
            await state.sessions.close(ticket, outcome.backend, True, outcome.tokens_in, tokens_out=outcome.tokens_out,
                                       replica=attempt.report.replica)
    finally:
        finish(outcome)
    _offer_judge(state, decision, call.endpoint, lambda: dispatch.answer_text(resp))
    headers = {**limit_headers, **_headers(decision, attempt.backend.name, attempt.tried)}
    headers["x-mixroute-cost-usd"] = f"{outcome.cost_usd:.10f}"
    return FastJSONResponse(rendered, headers=headers)


def _offer_judge(state, decision: Decision, endpoint: str, answer: Callable[[], str]) -> None:
    """Offer an answered request to the judge (:mod:`gateway.judge`): a draw and a queue put."""
    judge = getattr(state, "judge", None)
    if judge is not None and endpoint in ("chat", "completions"):
        judge.offer(decision.record, endpoint, decision.body, answer)


async def _open_session(request: Request, runtime: Runtime, principal: Principal, endpoint: str,
                        body: dict, call: DoorCall | None = None) -> Ticket | None:
    """The chat request's session (:mod:`gateway.sessions`), with what its door found
    (``call``); ``None`` for other endpoints, pinned requests and routes with sessions off."""
    if endpoint != "chat" or not isinstance(body, dict):
        return None
    return await request.app.state.sessions.open(
        runtime.router, principal.tenant, request.headers, body, hint=call.session_hint if call else None,
        follows=call.session_follows if call else None, answer_id=call.session_answer_id if call else None)


def _finisher(store, admission: Admission, live, prefix_hash: str | None = None) -> Callable[[OutcomeRecord], None]:
    """Record an outcome, settle the request's limits with it and update live state."""

    def finish(outcome: OutcomeRecord) -> None:
        store.record_outcome(outcome)
        admission.settle(outcome)
        if outcome.backend is not None:
            ok = outcome.status == "ok"
            live.finished(outcome.backend, ttft_s=outcome.ttft_s if ok else None,
                          latency_s=outcome.latency_s if ok else None)
            if ok and prefix_hash:
                live.saw_prefix(outcome.backend, prefix_hash)

    return finish


async def _stream(request: Request, runtime: Runtime, finish, attempt: dispatch.Attempt, body: dict,
                  limit_headers: dict[str, str], door: Door, call: DoorCall, ctx: DoorContext,
                  ticket: Ticket | None = None):
    decision = attempt.decision
    try:
        first, chunks = await _unless_client_leaves(request, dispatch.open_stream(runtime, attempt, body))
    except ClientGone:
        finish(attempt.outcome(runtime, status="client_disconnected", http_status=CLIENT_CLOSED, streamed=True))
        return Response(status_code=CLIENT_CLOSED)
    except BackendError as exc:
        finish(attempt.outcome(runtime, status="error", http_status=exc.status, error=exc, streamed=True))
        return _error_response(exc, decision, attempt, limit_headers, door)
    call.report = attempt.report
    encoder = door.encoder(call, decision.record.request_id, attempt.backend.name, attempt.backend.model)
    gen = _relay(runtime, finish, attempt, first, chunks, encoder, door, call, ctx, ticket)
    return StreamingResponse(gen, media_type="text/event-stream",
                             headers={**limit_headers, **_headers(decision, attempt.backend.name, attempt.tried),
                                      "cache-control": "no-cache"})


async def _relay(runtime: Runtime, finish, attempt: dispatch.Attempt, first: dict, chunks: AsyncIterator[dict],
                 encoder: StreamEncoder, door: Door, call: DoorCall, ctx: DoorContext,
                 ticket: Ticket | None = None) -> AsyncIterator[bytes]:
    """Relay chunks as the door's SSE; record the outcome when the stream ends, breaks or is cancelled."""
    ttft = (attempt.first_at or time.perf_counter()) - attempt.started
    last_at, gaps, usage, text = time.perf_counter(), [], None, []
    status, error = "client_disconnected", None
    try:
        chunk = first
        while True:
            if chunk.get("usage"):
                usage = chunk["usage"]
            for choice in chunk.get("choices") or ():
                piece = (choice.get("delta") or {}).get("content") or choice.get("text")
                if piece:
                    text.append(piece)
            if chunk.get("choices"):
                out = encoder.chunk(chunk)
                if out:
                    yield out
            elif usage is not None:
                cost = dispatch.call_cost(runtime, attempt.backend.name, usage, attempt.report.cost_usd)
                out = encoder.usage(chunk, {**usage, "cost_usd": cost})
                if out:
                    yield out
            try:
                chunk = await chunks.__anext__()
            except StopAsyncIteration:
                break
            now = time.perf_counter()
            gaps.append(now - last_at)
            last_at = now
        status = "ok"
        # Before the last event: a client may send its next request (the next turn of its
        # session, previous_response_id on the Responses door) as soon as it has read it.
        if ticket is not None:
            tokens_in = int((usage or {}).get("prompt_tokens") or 0) or dispatch.prompt_estimate(attempt)
            await ctx.request.app.state.sessions.close(
                ticket, attempt.backend.name, True, tokens_in, text_out="".join(text),
                tokens_out=(usage or {}).get("completion_tokens"), replica=attempt.report.replica)
        await door.after(call, getattr(encoder, "final", None) or {}, ctx)
        yield encoder.done()
    except Exception as exc:  # noqa: BLE001  # any break after the head still ends the stream the door's way
        status, error = "error", dispatch.stream_error(attempt, exc)
        yield encoder.error(error)
    finally:
        await chunks.aclose()
        itl = sum(gaps) / len(gaps) if gaps else None
        finish(attempt.outcome(
            runtime, status=status, http_status=200, usage=usage, error=error,
            ttft=ttft, itl=itl, streamed=True, fallback_text="".join(text)))
        if status == "ok":
            _offer_judge(ctx.request.app.state, attempt.decision, call.endpoint, lambda: "".join(text))
