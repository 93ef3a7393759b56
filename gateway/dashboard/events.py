"""The dashboard's adapter events: ``GET /dashboard/api/events`` (JSON), shown as a card.

The answer: ``active`` (the adapter version this gateway decides with), ``shadow`` (the
version decided beside it, or ``null``) and ``events``, newest first: promotions,
rollbacks and the guard's automatic rollbacks from the versions folder's event log
(:mod:`router.learning.versions`), each ``{at, event, version, from, by, reason}``.
Query parameter ``limit``: 1 to :data:`MAX_LISTED` (default 50). Errors as
``/dashboard/api/summary``.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from starlette.responses import Response

from gateway.dashboard.routes import NotSignedIn, viewer
from gateway.responses import FastJSONResponse
from router.errors import InvalidRequest

MAX_LISTED = 1000
"""Most events one answer lists."""

router = APIRouter(include_in_schema=False)


@router.get("/dashboard/api/events")
async def api(request: Request, limit: int = 50) -> Response:
    if await viewer(request) is None:
        raise NotSignedIn("Sign in at /dashboard/login")
    if not 1 <= limit <= MAX_LISTED:
        raise InvalidRequest(f"'limit' must be 1 to {MAX_LISTED}", param="limit", code="invalid_value")
    holder = request.app.state.policies
    watcher = getattr(request.app.state, "adapters", None)
    events = await asyncio.to_thread(watcher.versions.events, limit) if watcher is not None else []
    return FastJSONResponse({"active": holder.adapter_version,
                             "shadow": holder.shadow.version if holder.shadow is not None else None,
                             "events": events[::-1]}, headers={"cache-control": "no-store"})
