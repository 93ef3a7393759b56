"""``POST /v1/messages`` and ``POST /v1/messages/count_tokens`` (Anthropic Messages API).

Creation runs the shared pipeline (:func:`gateway.api.completions.complete`) with the
Messages door. The door is set on the request before anything can fail, so that an auth
failure or an unreadable body gets Anthropic's error envelope too. The key is read from
``x-api-key`` (what the ``anthropic`` SDK sends) or ``Authorization: Bearer``
(:func:`gateway.auth.guard.presented_key`); ``anthropic-version`` and ``anthropic-beta``
are accepted and not needed.
"""

from __future__ import annotations

import time

from fastapi import APIRouter, Request

from gateway.api.completions import complete
from gateway.api.deps import hot_path_deps
from gateway.auth.guard import OPEN
from gateway import observability
from gateway.doors.messages import MESSAGES, count_tokens
from gateway.doors.messages_shapes import CountTokensRequest, MessagesRequest, request_body_schema
from gateway.request_body import read_json, refuse_cross_site
from gateway.responses import FastJSONResponse
from router.decision import new_request_id
from router.errors import UnknownModel, WrongTask
from router.policy.tasks import target_task, wrong_task_message
from router.records import COUNT_TOKENS, DecisionRecord, OutcomeRecord

router = APIRouter()


@router.post("/v1/messages", openapi_extra=request_body_schema(MessagesRequest))
async def create_message(request: Request):
    request.state.door = MESSAGES
    runtime, settings, principal = await hot_path_deps(request)
    return await complete(request, runtime, settings, principal, MESSAGES)


@router.post("/v1/messages/count_tokens", openapi_extra=request_body_schema(CountTokensRequest))
async def count_message_tokens(request: Request):
    request.state.door = MESSAGES
    runtime, settings, principal = await hot_path_deps(request)
    if principal is OPEN:
        refuse_cross_site(request.headers.get("content-type"))
    started = time.perf_counter()
    raw = await read_json(request, settings.max_body_bytes)
    counted = count_tokens(raw)
    policy, model = runtime.loaded.policy, raw["model"]
    principal.check_model(model)
    route, backend = policy.route(model), policy.backend(model)
    if route is None and backend is None:
        raise UnknownModel(f"The model '{model[:100]}' does not exist", param="model")
    task = target_task(policy, route, backend)
    if task != "chat":  # checked like the Messages request it counts for
        raise WrongTask(wrong_task_message(policy, model, task, "chat"), param="model")
    # Counting is not routing: no classifier pass and nothing dispatched or billed. It is still
    # a request the gateway answered, so it gets its decision and outcome rows like every other
    # (a client's count shows in the logs and the request counts). The decision is marked
    # pinned and carries no prompt hash, so what-if, versions eval, train --from-logs and the
    # retry signal, which read routed answers only, skip it; its endpoint says what it was. No
    # model read the prompt, so the outcome has no tokens (token metrics count model work); the
    # count is in the decision's signals.
    request_id = new_request_id()
    record = DecisionRecord(
        request_id=request_id, route=route.name if route else backend.name, policy_hash=runtime.loaded.hash,
        chosen="" if route else backend.name, reason=COUNT_TOKENS, candidates=[], tenant=principal.tenant,
        key_id=principal.key.key_id if principal.key is not None else None, endpoint=COUNT_TOKENS, pinned=True,
        signals={"door": "messages", "input_tokens": counted["input_tokens"]})
    store = request.app.state.store
    observability.record_decision(store, record)
    observability.finisher(record, store.record_outcome)(OutcomeRecord(
        request_id=request_id, backend=None if route else backend.name, model=None if route else backend.model,
        status="ok", http_status=200, latency_s=time.perf_counter() - started, cost_usd=0.0))
    headers = {"x-mixroute-request-id": request_id, "x-mixroute-route": route.name if route else "",
               "x-mixroute-cost-usd": "0"}
    if route is None:
        headers["x-mixroute-backend"] = backend.name
    return FastJSONResponse(counted, headers=headers)
