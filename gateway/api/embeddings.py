"""``POST /v1/embeddings``: the OpenAI Embeddings API, through the shared pipeline of
:func:`gateway.api.completions.complete` (decision row, limits and budgets, dispatch with
fallback, outcome row with the cost, ``x-mixroute-*`` headers) with the embeddings door
(:mod:`gateway.doors.embeddings`); the decision itself is
:func:`router.embeddings.decide_embedding` (the cheapest embedding backend, no classifier)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from gateway.api.completions import complete
from gateway.api.deps import hot_path_deps
from gateway.doors.embeddings import EMBEDDINGS
from gateway.openapi import EmbeddingsRequest, request_body

router = APIRouter()


@router.post("/v1/embeddings", openapi_extra=request_body(EmbeddingsRequest))
async def embeddings(request: Request):
    request.state.door = EMBEDDINGS  # before anything can fail: errors in the door's envelope
    runtime, settings, principal = await hot_path_deps(request)
    return await complete(request, runtime, settings, principal, EMBEDDINGS)
