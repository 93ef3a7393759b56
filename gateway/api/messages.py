"""``POST /v1/messages`` and ``POST /v1/messages/count_tokens`` (Anthropic Messages API).

Creation runs the shared pipeline (:func:`gateway.api.completions.complete`) with the
Messages door. The door is set on the request before anything can fail, so that an auth
failure or an unreadable body gets Anthropic's error envelope too. The key is read from
``x-api-key`` (what the ``anthropic`` SDK sends) or ``Authorization: Bearer``
(:func:`gateway.auth.guard.presented_key`); ``anthropic-version`` and ``anthropic-beta``
are accepted and not needed.
"""

from __future__ import annotations

from fastapi import APIRouter, Request

from gateway.api.completions import complete
from gateway.api.deps import hot_path_deps
from gateway.auth.guard import OPEN
from gateway.doors.messages import MESSAGES, count_tokens
from gateway.doors.messages_shapes import CountTokensRequest, MessagesRequest, request_body_schema
from gateway.request_body import read_json, refuse_cross_site
from gateway.responses import FastJSONResponse
from router.decision import new_request_id
from router.errors import UnknownModel

router = APIRouter()


@router.post("/v1/messages", openapi_extra=request_body_schema(MessagesRequest))
async def create_message(request: Request):
    request.state.door = MESSAGES
    runtime, settings, principal = await hot_path_deps(request)
    return await complete(request, runtime, settings, principal, MESSAGES)


@router.post("/v1/messages/count_tokens", openapi_extra=request_body_schema(CountTokensRequest))
async def count_message_tokens(request: Request):
    request.state.door = MESSAGES
    runtime, settings, principal = await hot_path_deps(request, records=False)
    if principal is OPEN:
        refuse_cross_site(request.headers.get("content-type"))
    raw = await read_json(request, settings.max_body_bytes)
    counted = count_tokens(raw)
    policy, model = runtime.loaded.policy, raw["model"]
    principal.check_model(model)
    route, backend = policy.route(model), policy.backend(model)
    if route is None and backend is None:
        raise UnknownModel(f"The model '{model[:100]}' does not exist", param="model")
    # Counting is not routing: no classifier pass, no decision or outcome row (nothing is
    # dispatched or billed); the headers say which route or pinned backend was named.
    headers = {"x-mixroute-request-id": new_request_id(), "x-mixroute-route": route.name if route else ""}
    if route is None:
        headers["x-mixroute-backend"] = backend.name
    return FastJSONResponse(counted, headers=headers)
