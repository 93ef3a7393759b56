"""The cost dashboard: ``/dashboard`` (page), ``/dashboard/login``, ``/dashboard/logout``,
``/dashboard/api/summary`` (JSON) and ``/dashboard/static/*`` (bundled Chart.js, no CDN).

Access and sessions: :mod:`gateway.dashboard.session`. Numbers: :mod:`gateway.dashboard.queries`,
run in a worker thread so the event loop never waits on the database.

``GET /dashboard/api/summary`` query parameters:

- ``since``, ``until``: ISO 8601 times (UTC when no offset) or a duration back from now
  (``90m``, ``24h``, ``7d``); default the last 24 hours.
- ``reference``: backend to compute savings against (default: the highest output price).

Errors::

    NotSignedIn   401 authentication_error  dashboard_login_required
    InvalidRequest 400 invalid_request_error invalid_value  (bad since/until/reference, or a
                                                           time outside what dates can hold)
    StoreUnavailable 503 api_error            store_unavailable (the database cannot be queried)
"""

from __future__ import annotations

import asyncio
import hmac
import html
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.staticfiles import StaticFiles
from sqlalchemy.exc import SQLAlchemyError
from starlette.responses import FileResponse, HTMLResponse, RedirectResponse, Response

from backends.errors import MixrouteError
from gateway.api.feedback import StoreUnavailable
from gateway.auth.admin_ops import tenant_budgets
from gateway.auth.guard import AuthError, presented_key
from gateway.auth.keys import list_keys
from gateway.dashboard import queries, worker
from gateway.dashboard.session import COOKIE, Sessions, Viewer, is_loopback
from gateway.responses import FastJSONResponse
from router.errors import InvalidRequest

STATIC = Path(__file__).parent / "static"
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([mhdw])$")
_UNITS = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
MAX_FORM_BYTES = 4096

router = APIRouter(include_in_schema=False)


class NotSignedIn(MixrouteError):
    status = 401
    type = "authentication_error"
    code = "dashboard_login_required"


def install(app, settings) -> None:
    """Add the dashboard routes and static files to ``app``."""
    app.state.dashboard_sessions = Sessions(settings.admin_key)
    app.include_router(router)
    app.mount("/dashboard/static", StaticFiles(directory=STATIC), name="dashboard-static")


async def viewer(request: Request) -> Viewer | None:
    """Who is looking, from the admin key as a Bearer token (scripts), the session cookie or
    loopback access; ``None``: sign in first."""
    state = request.app.state
    if _bearer_admin(request):
        return Viewer(admin=True)
    v = state.dashboard_sessions.check(request.cookies.get(COOKIE))
    if v is not None:
        if v.key_id is not None and not await asyncio.to_thread(_key_active, state.store.engine, v):
            return None
        return v
    if not state.settings.admin_key and is_loopback(request.client.host if request.client else None):
        return Viewer(admin=True)
    return None


def _bearer_admin(request: Request) -> bool:
    """Whether the request presents ``MIXROUTE_ADMIN_KEY`` (``Authorization: Bearer``)."""
    admin_key = request.app.state.settings.admin_key
    key = presented_key(request.headers)
    return bool(admin_key and key) and hmac.compare_digest(key.encode(), admin_key.encode())


def _key_active(engine, v: Viewer) -> bool:
    return engine is not None and any(k.key_id == v.key_id for k in list_keys(engine, v.tenant))


@router.get("/dashboard")
async def page(request: Request) -> Response:
    if await viewer(request) is None:
        return RedirectResponse("/dashboard/login", status_code=303)
    return FileResponse(STATIC / "index.html", headers={"cache-control": "no-store"})


@router.get("/dashboard/login")
async def login_form(request: Request) -> Response:
    return _login_page("")


@router.post("/dashboard/login")
async def login(request: Request) -> Response:
    key = await _form_key(request)
    state = request.app.state
    try:
        principal = await state.auth.authenticate({"authorization": f"Bearer {key}"} if key else {})
    except AuthError:
        return _login_page("Wrong key: use the admin key or a tenant's API key.", status=401)
    if principal.admin:
        v = Viewer(admin=True)
    elif principal.key is not None:
        v = Viewer(admin=False, tenant=principal.tenant, key_id=principal.key.key_id)
    else:  # auth is off: there is nothing to log in with
        return _login_page("This gateway has no admin key: open the dashboard from the gateway's own host "
                           "(loopback), or set MIXROUTE_ADMIN_KEY.", status=403)
    resp = RedirectResponse("/dashboard", status_code=303)
    resp.set_cookie(COOKIE, state.dashboard_sessions.issue(v), max_age=int(state.dashboard_sessions.ttl_s),
                    path="/dashboard", httponly=True, samesite="strict", secure=request.url.scheme == "https")
    return resp


@router.post("/dashboard/logout")
async def logout() -> Response:
    resp = RedirectResponse("/dashboard/login", status_code=303)
    resp.delete_cookie(COOKIE, path="/dashboard")
    return resp


@router.get("/dashboard/api/summary")
async def summary(request: Request, since: str | None = None, until: str | None = None,
                  reference: str | None = None) -> Response:
    v = await viewer(request)
    if v is None:
        raise NotSignedIn("Sign in at /dashboard/login")
    now = datetime.now(timezone.utc)
    end = parse_time(until, now, "until") if until else now + timedelta(seconds=1)
    try:
        start = parse_time(since, now, "since") if since else end - timedelta(hours=24)
    except OverflowError:  # 'until' near year 1: its default 24 hours earlier does not exist
        raise InvalidRequest("'until' is too early to look 24 hours back from; give 'since' too",
                             param="until", code="invalid_value") from None
    if start >= end:
        raise InvalidRequest("'since' must be before 'until'", param="since", code="invalid_value")
    runtime = request.app.state.policies.current
    pricing = dict(runtime.router.pricing) if runtime is not None else {}
    if reference is not None and reference not in pricing:
        raise InvalidRequest(f"Unknown reference backend (known: {', '.join(sorted(pricing))})",
                             param="reference", code="invalid_value")
    engine = request.app.state.store.engine
    window = queries.Window(start, end, v.scope)
    try:
        if engine.url.get_backend_name() == "sqlite" and engine.url.database in (None, "", ":memory:"):
            # An in-memory database exists only in this process (tests): no worker.
            data = await asyncio.to_thread(queries.summary, engine, window, pricing, reference)
        else:
            url = engine.url.render_as_string(hide_password=False)
            data = await worker.summary(url, window, pricing, reference)
    except (SQLAlchemyError, worker.StoreDown):
        raise StoreUnavailable("The store cannot be queried right now; retry later") from None
    data["viewer"] = {"admin": v.admin, "tenant": v.scope}
    data["budgets"], data["runaway"] = await _operations(request, engine, v.scope)
    return FastJSONResponse(data, headers={"cache-control": "no-store"})


async def _operations(request: Request, engine, scope: str | None) -> tuple[list[dict], list[dict]]:
    """The tenants' budgets this period and this gateway's recent runaway-spend events, as
    far as ``scope`` (a tenant; ``None``: all) may see them."""
    try:
        budgets = await asyncio.to_thread(tenant_budgets, engine)
    except SQLAlchemyError:
        raise StoreUnavailable("The store cannot be queried right now; retry later") from None
    rows = [{"tenant": name, **spend.as_dict()} for name, spend in budgets if scope in (None, name)]
    watch = getattr(request.app.state, "runaway", None)
    events = [] if watch is None else [e for e in watch.recent_events() if scope is None
                                       or (e["scope"] == "tenant" and e["name"] == scope)]
    return rows, events


def parse_time(value: str, now: datetime, param: str) -> datetime:
    """An ISO 8601 time (naive = UTC) or a duration back from ``now`` (``90m``, ``24h``, ``7d``, ``2w``).

    Raises:
        InvalidRequest: neither form, or a time outside ``datetime``'s range.
    """
    m = _DURATION.match(value.strip())
    try:
        if m:
            return now - timedelta(seconds=float(m.group(1)) * _UNITS[m.group(2)])
        t = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        return t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t.astimezone(timezone.utc)
    except ValueError:
        raise InvalidRequest(f"'{param}' must be an ISO 8601 time or a duration like 24h", param=param,
                             code="invalid_value") from None
    except OverflowError:  # 999999d back, or a time zone shift past year 1 / 9999
        raise InvalidRequest(f"'{param}' is outside the dates this can handle", param=param,
                             code="invalid_value") from None


async def _form_key(request: Request) -> str:
    from urllib.parse import parse_qs

    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > MAX_FORM_BYTES:
        return ""
    chunks, size = [], 0
    async for chunk in request.stream():  # stop reading past the cap instead of buffering it all
        size += len(chunk)
        if size > MAX_FORM_BYTES:
            return ""
        chunks.append(chunk)
    return (parse_qs(b"".join(chunks).decode(errors="replace")).get("key") or [""])[0].strip()


def _login_page(message: str, status: int = 200) -> HTMLResponse:
    text = (STATIC / "login.html").read_text().replace("{{message}}", html.escape(message))
    return HTMLResponse(text, status_code=status, headers={"cache-control": "no-store"})
