"""``GET /metrics``: the app's Prometheus registry in the text exposition format.

Unauthenticated, like most Prometheus targets: it carries counts, never prompts or keys.
Restrict it at the network level (or scrape a port not exposed publicly) if tenant names
are sensitive. The scrape runs in a worker thread because a few values (feedback counts)
come from the database.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.responses import Response

router = APIRouter()


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    obs = request.app.state.observability
    obs.metrics.scraped.store = getattr(request.app.state, "store", None)
    obs.metrics.scraped.sessions = request.app.state.sessions.store
    obs.metrics.replicas.policies = request.app.state.policies
    obs.metrics.scraped.runaway = getattr(request.app.state, "runaway", None)
    body = await asyncio.to_thread(generate_latest, obs.metrics.registry)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
