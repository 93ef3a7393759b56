"""The dashboard's sessions: ``GET /dashboard/api/sessions`` (JSON) and ``GET /dashboard/sessions``
(a table over it).

A session is the decisions whose ``signals.session`` share an id (per tenant and route; see
docs/SESSIONS.md), joined with their outcomes. Per session: turns answered, switches (turns
answered by another backend than the turn before), escalations (``session_escalated``), the
cached share of its input tokens (``tokens_cached / tokens_in``) and its cost (USD).

Query parameters: ``since``, ``until`` (as ``/dashboard/api/summary``) and ``limit`` (sessions
listed, most expensive first; 1 to :data:`MAX_LISTED`, default 100). The totals cover every
session of the window, not only those listed. Errors as ``/dashboard/api/summary``.
"""

from __future__ import annotations

import asyncio
import statistics
from datetime import datetime, timedelta, timezone
from typing import Any

import sqlalchemy as sa
from fastapi import APIRouter, Request
from sqlalchemy import Engine, select
from sqlalchemy.exc import SQLAlchemyError
from starlette.responses import FileResponse, RedirectResponse, Response

from gateway.api.feedback import StoreUnavailable
from gateway.dashboard.queries import MAX_ROWS, Window
from gateway.dashboard.routes import STATIC, NotSignedIn, parse_time, viewer
from gateway.responses import FastJSONResponse
from gateway.store.models import Decision, Outcome
from router.errors import InvalidRequest

MAX_LISTED = 1000
"""Most sessions one answer lists."""

router = APIRouter(include_in_schema=False)


def _rows(engine: Engine, w: Window) -> list:
    # The JSON column is matched as text: the same on SQLite and PostgreSQL, and it skips the
    # (many) decisions outside any session before they are decoded.
    q = (select(Decision.created_at, Decision.tenant, Decision.route, Decision.reason, Decision.signals,
                Outcome.backend, Outcome.status, Outcome.tokens_in, Outcome.tokens_cached, Outcome.cost_usd)
         .join(Outcome, Outcome.request_id == Decision.request_id)
         .where(Decision.created_at >= w.since, Decision.created_at < w.until,
                sa.cast(Decision.signals, sa.Text).like('%"session"%')))
    if w.tenant is not None:
        q = q.where(Decision.tenant == w.tenant)
    with engine.connect() as conn:
        return conn.execute(q.order_by(Decision.created_at).limit(MAX_ROWS)).all()


def sessions(engine: Engine, w: Window, limit: int = 100) -> dict[str, Any]:
    """The sessions of window ``w`` (synchronous: run it in a thread)."""
    found: dict[tuple, dict] = {}
    rows = _rows(engine, w)
    for r in rows:
        s = (r.signals or {}).get("session") if isinstance(r.signals, dict) else None
        if not isinstance(s, dict) or r.status != "ok":
            continue
        key = (r.tenant, r.route, s.get("id"))
        e = found.get(key)
        if e is None:
            e = found[key] = {"id": s.get("id"), "tenant": r.tenant, "route": r.route, "explicit": s.get("explicit"),
                              "turns": 0, "switches": 0, "escalations": 0, "backends": [], "tokens_in": 0,
                              "tokens_cached": 0, "cost_usd": 0.0, "first": r.created_at, "last": r.created_at,
                              "_on": None}
        e["turns"] += 1
        e["switches"] += e["_on"] is not None and r.backend != e["_on"]
        e["escalations"] += r.reason == "session_escalated"
        e["_on"] = r.backend
        if r.backend not in e["backends"]:
            e["backends"].append(r.backend)
        e["tokens_in"] += r.tokens_in or 0
        e["tokens_cached"] += r.tokens_cached or 0
        e["cost_usd"] += r.cost_usd or 0.0
        e["last"] = r.created_at
    listed = sorted(found.values(), key=lambda e: -e["cost_usd"])
    for e in listed:
        e.pop("_on")
        e["cached_share"] = e["tokens_cached"] / e["tokens_in"] if e["tokens_in"] else None
        e["first"], e["last"] = e["first"].isoformat(), e["last"].isoformat()
    tokens_in = sum(e["tokens_in"] for e in listed)
    totals = {
        "sessions": len(listed), "turns": sum(e["turns"] for e in listed),
        "cost_usd": sum(e["cost_usd"] for e in listed),
        "cost_per_session_usd": statistics.fmean(e["cost_usd"] for e in listed) if listed else None,
        "switches_median": statistics.median(e["switches"] for e in listed) if listed else None,
        "cached_share": sum(e["tokens_cached"] for e in listed) / tokens_in if tokens_in else None,
    }
    return {"since": w.since.isoformat(), "until": w.until.isoformat(), "totals": totals,
            "sessions": listed[:limit], "truncated": len(rows) >= MAX_ROWS}


@router.get("/dashboard/sessions")
async def page(request: Request) -> Response:
    if await viewer(request) is None:
        return RedirectResponse("/dashboard/login", status_code=303)
    return FileResponse(STATIC / "sessions.html", headers={"cache-control": "no-store"})


@router.get("/dashboard/api/sessions")
async def api(request: Request, since: str | None = None, until: str | None = None, limit: int = 100) -> Response:
    v = await viewer(request)
    if v is None:
        raise NotSignedIn("Sign in at /dashboard/login")
    if not 1 <= limit <= MAX_LISTED:
        raise InvalidRequest(f"'limit' must be 1 to {MAX_LISTED}", param="limit", code="invalid_value")
    now = datetime.now(timezone.utc)
    end = parse_time(until, now, "until") if until else now + timedelta(seconds=1)
    start = parse_time(since, now, "since") if since else end - timedelta(hours=24)
    if start >= end:
        raise InvalidRequest("'since' must be before 'until'", param="since", code="invalid_value")
    try:
        data = await asyncio.to_thread(sessions, request.app.state.store.engine, Window(start, end, v.scope), limit)
    except SQLAlchemyError:
        raise StoreUnavailable("The store cannot be queried right now; retry later") from None
    return FastJSONResponse(data, headers={"cache-control": "no-store"})
