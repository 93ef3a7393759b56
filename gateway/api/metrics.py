"""``GET /metrics``: the app's Prometheus registry in the text exposition format.

The series name every tenant and its spend, so who may read them follows
``MIXROUTE_METRICS_AUTH``: ``admin`` needs the admin key (``Authorization: Bearer ...``, as
Prometheus' ``authorization`` scrape setting sends it), ``none`` serves anyone, and ``auto``
(the default) is ``admin`` while auth is on (an admin key or any API key exists) and
``none`` while it is off (loopback only; docs/OBSERVABILITY.md). The scrape runs in a worker
thread because a few values (feedback counts) come from the database.

Errors::

    AuthError  401 authentication_error  invalid_api_key  (no key, or not the admin key)
"""

from __future__ import annotations

import asyncio
import hmac

from fastapi import APIRouter, Request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.responses import Response

from gateway.auth.guard import AuthError, presented_key

router = APIRouter()


async def _check(request: Request) -> None:
    state = request.app.state
    mode = state.settings.metrics_auth
    if mode == "none" or (mode == "auto" and not await state.auth.required()):
        return
    key, admin_key = presented_key(request.headers), state.settings.admin_key
    if not key:
        raise AuthError("/metrics needs the admin key: send 'Authorization: Bearer <MIXROUTE_ADMIN_KEY>' "
                        "(or set MIXROUTE_METRICS_AUTH=none to serve it to anyone who can reach it)")
    if not (admin_key and hmac.compare_digest(key.encode(), admin_key.encode())):
        raise AuthError("/metrics needs the admin key (MIXROUTE_ADMIN_KEY); a tenant's key is not enough")


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    await _check(request)
    obs = request.app.state.observability
    obs.metrics.scraped.store = getattr(request.app.state, "store", None)
    obs.metrics.scraped.sessions = request.app.state.sessions.store
    obs.metrics.replicas.policies = request.app.state.policies
    obs.metrics.scraped.runaway = getattr(request.app.state, "runaway", None)
    body = await asyncio.to_thread(generate_latest, obs.metrics.registry)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
