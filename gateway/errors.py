"""HTTP rendering of errors: every error leaves the gateway as the OpenAI envelope
``{"error": {"message", "type", "param", "code"}}`` with the status its class declares
(see :mod:`router.errors` and :mod:`backends.errors` for the tree). Unexpected exceptions
become a 500 ``internal_error``; their stack trace goes to the server log only.
"""

from __future__ import annotations

import json
import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from gateway.responses import FastJSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from backends.errors import MixrouteError
from gateway.doors.messages import MESSAGES
from router.errors import RequestRejected



def _messages_path(path: str) -> bool:
    """``/v1/messages`` and any path below it (``/v1/messages/batches``, which the gateway
    does not serve): a wrong method or an unknown path there is answered in Anthropic's envelope."""
    return path == "/v1/messages" or path.startswith("/v1/messages/")

log = logging.getLogger("mixroute.gateway")

_HTTP_TYPES = {401: ("authentication_error", "invalid_api_key"), 403: ("permission_error", "forbidden"),
               404: ("invalid_request_error", "not_found"), 405: ("invalid_request_error", "method_not_allowed"),
               413: ("invalid_request_error", "request_too_large"), 429: ("rate_limit_error", "rate_limit_exceeded")}


def envelope(status: int, message: str, type_: str, code: str | None, param: str | None = None,
             headers: dict[str, str] | None = None, request: Request | None = None) -> FastJSONResponse:
    """The error response: in the envelope of the door that took ``request`` (a door sets
    ``request.state.door`` before anything can fail), else OpenAI's."""
    door = getattr(request.state, "door", None) if request is not None else None
    if door is None and request is not None and _messages_path(request.url.path):
        door = MESSAGES  # an unknown path or method of Anthropic's API: its client reads its envelope
    if door is not None:
        body = door.error_body(status, message, type_, code, param)
    else:
        body = {"error": {"message": message, "type": type_, "param": param, "code": code}}
    return FastJSONResponse(body, status_code=status, headers=headers)


async def _mixroute_error(request: Request, exc: MixrouteError) -> FastJSONResponse:
    headers = dict(getattr(exc, "headers", None) or {})
    if isinstance(exc, RequestRejected):
        headers["retry-after"] = str(max(1, round(exc.retry_after_s)))
    if getattr(request.state, "door", None) is not None:
        return envelope(exc.status, exc.message, exc.type, exc.code, exc.param, headers, request)
    return FastJSONResponse(exc.to_envelope(), status_code=exc.status, headers=headers)


async def _http_error(request: Request, exc: StarletteHTTPException) -> FastJSONResponse:
    type_, code = _HTTP_TYPES.get(exc.status_code, ("invalid_request_error" if exc.status_code < 500 else "api_error",
                                                    None))
    msg = exc.detail if isinstance(exc.detail, str) else "Request failed"
    headers = getattr(exc, "headers", None)
    if exc.status_code == 404:
        msg = f"Unknown path {request.url.path}"
    elif exc.status_code == 405:
        allow = allowed_methods(request)
        if allow:
            headers = {k: v for k, v in (headers or {}).items() if k.lower() != "allow"}
            headers["allow"] = ", ".join(allow)
            msg = f"Method {request.method} is not allowed on {request.url.path} (allowed: {', '.join(allow)})"
    return envelope(exc.status_code, msg, type_, code, headers=headers, request=request)


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def allowed_methods(request: Request) -> list[str]:
    """Every method some route of the app serves at the request's path. Starlette's own 405
    names the methods of the first route matching the path only, and ``GET`` and ``HEAD`` of
    one path are two routes here (an ``Allow: HEAD`` without ``GET``). Each method is tried
    against the app's routes as they match (FastAPI nests included routers in its own
    route objects, so their ``methods`` cannot be read off the top-level list)."""
    routes = request.app.router.routes
    return [m for m in _METHODS
            if any(route.matches({**request.scope, "method": m})[0] == Match.FULL for route in routes)]


async def _validation_error(request: Request, exc: RequestValidationError) -> FastJSONResponse:
    err = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
    if err.get("type") == "json_invalid":
        # A body FastAPI parsed itself (the admin API): its error names the character offset as
        # the "location" and drops the position from the message. Say it as the doors that
        # read their own body do (gateway.request_body): what is wrong, and at which line/column.
        where = err["loc"][-1] if err["loc"] and isinstance(err["loc"][-1], int) else 0
        doc = exc.body.decode("utf-8", "replace") if isinstance(exc.body, bytes) else str(exc.body or "")
        reason = json.JSONDecodeError((err.get("ctx") or {}).get("error", "JSON decode error"), doc, where)
        return envelope(400, f"The request body is not valid JSON: {reason}", "invalid_request_error",
                        "invalid_json", None, request=request)
    param = ".".join(str(p) for p in err["loc"] if p != "body") or None
    return envelope(400, f"{param}: {err['msg']}" if param else err["msg"], "invalid_request_error",
                    "invalid_value", param, request=request)


async def _unexpected(request: Request, exc: Exception) -> FastJSONResponse:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return envelope(500, "The gateway hit an internal error; it has been logged.", "api_error", "internal_error",
                    request=request)


def install(app: FastAPI) -> None:
    """Register the handlers on ``app``."""
    app.add_exception_handler(MixrouteError, _mixroute_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(Exception, _unexpected)
