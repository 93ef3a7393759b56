"""``POST /v1/responses``, ``GET /v1/responses/{id}``, ``DELETE /v1/responses/{id}`` and
``GET /v1/responses/{id}/input_items``.

Creation runs the shared pipeline (:func:`gateway.api.completions.complete`) with the
Responses door. Reading and deleting a stored response are scoped to the caller's tenant:
another tenant's response, an expired one and one that never existed get the same 404.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from sqlalchemy.exc import SQLAlchemyError

from gateway.api.completions import complete
from gateway.api.deps import hot_path_deps
from gateway.doors.responses import RESPONSES, ResponseNotFound, StoreUnavailable, stored_responses
from gateway.doors.responses_shapes import listed_item
from gateway.openapi import ResponsesRequest, request_body
from gateway.responses import FastJSONResponse
from router.errors import InvalidRequest

router = APIRouter()


@router.post("/v1/responses", openapi_extra=request_body(ResponsesRequest))
async def create_response(request: Request):
    request.state.door = RESPONSES
    runtime, settings, principal = await hot_path_deps(request)
    return await complete(request, runtime, settings, principal, RESPONSES)


async def _caller(request: Request):
    request.state.door = RESPONSES
    principal = await request.app.state.auth.authenticate(request.headers)
    return stored_responses(request.app.state.store, request.app.state.settings), principal.tenant


def _not_found(response_id: str) -> ResponseNotFound:
    return ResponseNotFound(f"Response with id '{response_id}' not found.", param="response_id")


def _unavailable() -> StoreUnavailable:
    return StoreUnavailable("The stored responses cannot be read now; retry later")


@router.get("/v1/responses/{response_id}")
async def get_response(request: Request, response_id: str):
    responses, tenant = await _caller(request)
    try:
        body = await responses.get(response_id, tenant)
    except SQLAlchemyError:
        raise _unavailable() from None
    if body is None:
        raise _not_found(response_id)
    return FastJSONResponse(body)


@router.get("/v1/responses/{response_id}/input_items")
async def list_input_items(request: Request, response_id: str, limit: str = "20", order: str = "desc",
                           after: str | None = None):
    """The input items of a stored response's own request, OpenAI's ``list`` object: ``limit``
    1 to 100 (default 20), ``order`` ``asc`` or ``desc`` (default, newest first), ``after`` an
    item id to start after."""
    responses, tenant = await _caller(request)
    if not (limit.isdigit() and 1 <= int(limit) <= 100):
        raise InvalidRequest(f"limit: must be an integer from 1 to 100, not {limit[:20]!r}", param="limit",
                             code="invalid_value")
    if order not in ("asc", "desc"):
        raise InvalidRequest(f"order: must be 'asc' or 'desc', not {order[:20]!r}", param="order", code="invalid_value")
    try:
        stored = await responses.input_items(response_id, tenant)
    except SQLAlchemyError:
        raise _unavailable() from None
    if stored is None:
        raise _not_found(response_id)
    items = [listed_item(item, response_id, i) for i, item in enumerate(stored)]
    if order == "desc":
        items.reverse()
    if after is not None:
        ids = [item["id"] for item in items]
        items = items[ids.index(after) + 1:] if after in ids else []
    page = items[:int(limit)]
    return FastJSONResponse({"object": "list", "data": page, "first_id": page[0]["id"] if page else None,
                             "last_id": page[-1]["id"] if page else None, "has_more": len(items) > len(page)})


@router.delete("/v1/responses/{response_id}")
async def delete_response(request: Request, response_id: str):
    responses, tenant = await _caller(request)
    try:
        deleted = await responses.remove(response_id, tenant)
    except SQLAlchemyError:
        raise _unavailable() from None
    if not deleted:
        raise _not_found(response_id)
    return FastJSONResponse({"id": response_id, "object": "response", "deleted": True})
