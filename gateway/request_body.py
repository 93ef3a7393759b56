"""Reading an API request's body, before any field is looked at: for a gateway without auth,
JSON content types only (no cross-site form posts); no compressed bodies; a size cap, read
as the body streams in; UTF-8; a JSON object no deeper than :data:`MAX_DEPTH`. Each refusal
is a :mod:`router.errors` error, so the client gets the OpenAI envelope.
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import Request
from starlette.requests import ClientDisconnect

from router.errors import ContextTooLarge, InvalidRequest, UnsupportedMediaType


def refuse_cross_site(content_type: str | None) -> None:
    """For a gateway with auth off: accept only JSON bodies (``application/json`` or
    ``application/*+json``), so that a web page cannot make a visitor's local gateway spend
    its backends' money with a cross-site form, ``fetch`` or beacon: the content types those
    send without a CORS preflight (``text/plain``, form types, or none at all: an untyped
    Blob, ``navigator.sendBeacon``) are refused, and JSON needs a preflight, which the
    gateway does not answer.

    Raises:
        UnsupportedMediaType: (415) no Content-Type, or one that is not JSON.
    """
    kind = (content_type or "").split(";", 1)[0].strip().lower()
    if kind == "application/json" or (kind.startswith("application/") and kind.endswith("+json")):
        return
    shown = f"Content-Type {kind}" if kind else "a request without Content-Type"
    raise UnsupportedMediaType(f"{shown} is not accepted while auth is off (a web page could send it cross-site); "
                               "send Content-Type: application/json", param="content-type")


async def read_json(request: Request, max_bytes: int) -> dict:
    """Read the body with a size cap and parse it as a JSON object.

    Raises:
        ContextTooLarge: body over ``max_bytes`` (413).
        InvalidRequest: not UTF-8, not JSON, or not an object (400).
        UnsupportedMediaType: a compressed body (``Content-Encoding`` other than
            ``identity``, 415): it used to be read as text and refused as "not valid UTF-8".
    """
    encoding = request.headers.get("content-encoding", "").strip().lower()
    if encoding not in ("", "identity"):
        raise UnsupportedMediaType(f"Content-Encoding {encoding[:40]!r} is not supported; send the request "
                                   "body uncompressed (Content-Encoding: identity or none)",
                                   code="unsupported_content_encoding")
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > max_bytes:
        raise ContextTooLarge(f"Request body of {declared} bytes exceeds the limit of {max_bytes} bytes")
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > max_bytes:
                raise ContextTooLarge(f"Request body exceeds the limit of {max_bytes} bytes")
            chunks.append(chunk)
    except ClientDisconnect:
        # The client went away mid-upload: nothing was accepted, nobody reads the answer.
        raise InvalidRequest("The client disconnected before the request body was complete",
                             code="client_disconnected") from None
    raw = b"".join(chunks)
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRequest(f"The request body is not valid UTF-8 (byte {exc.start})", code="invalid_encoding") from None
    if not raw.strip():
        raise InvalidRequest("The request body is empty; send a JSON object", code="invalid_json")
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"The request body is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(data, dict):
        raise InvalidRequest("The request body must be a JSON object", code="invalid_json")
    if _too_deep(data, MAX_DEPTH):
        raise InvalidRequest(f"The request body nests arrays/objects deeper than {MAX_DEPTH} levels",
                             code="invalid_json")
    return data


#: Deepest nesting of arrays/objects accepted in a body. orjson parses up to 1024 levels but
#: writes back at most 254 (a /v1/route answer, a body forwarded to a backend), so anything
#: deeper used to fail after it was accepted (a 500, or a 502 blamed on the backend).
MAX_DEPTH = 128


def _too_deep(data: Any, limit: int) -> bool:
    """Whether ``data`` nests lists/dicts more than ``limit`` levels (iterative: no recursion)."""
    level, frontier = 1, [data]
    while frontier:
        if level > limit:
            return True
        nxt = []
        for node in frontier:
            if isinstance(node, dict):
                nxt.extend(v for v in node.values() if isinstance(v, (dict, list)))
            elif isinstance(node, list):
                nxt.extend(v for v in node if isinstance(v, (dict, list)))
        frontier, level = nxt, level + 1
    return False
