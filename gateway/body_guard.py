"""Bounds on what request bodies may hold: the time to read one, and the bytes held by all
bodies in flight at once (one ASGI middleware, :class:`BodyGuard`, around every route).

Without them a client sending bodies slowly (a slowloris) held a connection and a task for
ever, and many large bodies at once grew the process without limit while small requests
waited. A body not read within ``MIXROUTE_BODY_READ_TIMEOUT_S`` gets 408
(:class:`BodyReadTimeout`); a body that would take the bytes held by bodies in flight past
``MIXROUTE_MAX_BODY_BYTES_IN_FLIGHT`` gets 503 with ``Retry-After`` (:class:`BodiesInFlightFull`);
both in the door's envelope (they are raised where the route reads the body). A response
that starts before its request's body was read whole closes the connection, so a client
cannot keep trickling bytes into it. The connection count itself is uvicorn's
``limit_concurrency`` (``MIXROUTE_MAX_CONNECTIONS``, :mod:`gateway.serve`).

Written as plain ASGI rather than with Starlette's ``BaseHTTPMiddleware``, which would
buffer streamed responses and cost a task per request on the hot path.
"""

from __future__ import annotations

import asyncio
import logging
import time

from backends.errors import MixrouteError

log = logging.getLogger("mixroute.gateway")

#: Seconds between two log lines about the same bound (hits in between are counted in the next).
LOG_EVERY_S = 60.0


class BodyReadTimeout(MixrouteError):
    status = 408
    type = "invalid_request_error"
    code = "request_timeout"


class BodiesInFlightFull(MixrouteError):
    status = 503
    type = "api_error"
    code = "server_busy"
    headers = {"retry-after": "1"}


class BoundLog:
    """One warning when a bound is hit, then at most one per :data:`LOG_EVERY_S` per bound,
    with the number of hits since the last line: a flood of refused requests is a few lines."""

    def __init__(self, every_s: float = LOG_EVERY_S) -> None:
        self.every_s = every_s
        self._last: dict[str, float] = {}
        self._hits: dict[str, int] = {}

    def hit(self, bound: str, message: str) -> bool:
        """Count a hit of ``bound``; log ``message`` (plus the count) if its line is due. Returns whether it logged."""
        self._hits[bound] = self._hits.get(bound, 0) + 1
        now = time.monotonic()
        if now - self._last.get(bound, -self.every_s) < self.every_s:
            return False
        hits, self._hits[bound], self._last[bound] = self._hits[bound], 0, now
        log.warning("%s (%d request(s) refused since the last such line; next line in %.0f s at most)",
                    message, hits, self.every_s)
        return True


BOUND_LOG = BoundLog()


class _Budget:
    """Bytes held by request bodies in flight, against a limit."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def take(self, n: int, mine: int) -> bool:
        # A body that holds everything in use may always go on: one body at the per-request
        # cap (MIXROUTE_MAX_BODY_BYTES) must pass even on a budget smaller than that.
        if self.used + n > self.limit and self.used > mine:
            return False
        self.used += n
        return True


class BodyGuard:
    """ASGI middleware; see the module docstring.

    Args:
        app: the ASGI app.
        read_timeout_s: seconds from the request head to the body's last byte.
        max_in_flight_bytes: bytes all bodies in flight may hold together (until their
            request ends: a request keeps its parsed body to the end of its answer).
    """

    def __init__(self, app, *, read_timeout_s: float, max_in_flight_bytes: int) -> None:
        self.app = app
        self.read_timeout_s = read_timeout_s
        self.budget = _Budget(max_in_flight_bytes)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        deadline = time.monotonic() + self.read_timeout_s
        held = 0
        complete = not _has_body(scope)

        async def guarded_receive():
            nonlocal held, complete
            if complete:  # after the body: waiting for the disconnect is not bounded
                return await receive()
            try:
                async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                    message = await receive()
            except TimeoutError:
                BOUND_LOG.hit("body_read_timeout", f"request body not read within MIXROUTE_BODY_READ_TIMEOUT_S="
                                                   f"{self.read_timeout_s:g} s: answered 408 and closed")
                raise BodyReadTimeout(f"The request body did not arrive within {self.read_timeout_s:g} s") from None
            if message["type"] != "http.request":
                complete = True
                return message
            size = len(message.get("body", b""))
            if not self.budget.take(size, held):
                BOUND_LOG.hit("body_bytes_in_flight", "request bodies in flight reached MIXROUTE_MAX_BODY_BYTES_IN_FLIGHT"
                                                      f"={self.budget.limit} bytes: answered 503")
                raise BodiesInFlightFull("The gateway holds too many request bodies at once; retry shortly")
            held += size
            complete = not message.get("more_body", False)
            return message

        async def guarded_send(message) -> None:
            if message["type"] == "http.response.start" and not complete:
                # Answered before the body was read whole: close, or the rest could trickle in for ever.
                message = {**message, "headers": [*message.get("headers", ()), (b"connection", b"close")]}
            await send(message)

        try:
            await self.app(scope, guarded_receive, guarded_send)
        finally:
            self.budget.used -= held


def _has_body(scope) -> bool:
    """Whether the request head announces a body (a length above 0, or chunked)."""
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            return value.strip() not in (b"0", b"")
        if name == b"transfer-encoding":
            return True
    return False


def install(app, settings) -> None:
    """Add :class:`BodyGuard` to ``app`` with the limits of ``settings``."""
    app.add_middleware(BodyGuard, read_timeout_s=settings.body_read_timeout_s,
                       max_in_flight_bytes=settings.max_body_bytes_in_flight)


class _UvicornLimitFilter(logging.Filter):
    """Drops uvicorn's warning per request refused at ``limit_concurrency`` and counts it in
    :data:`BOUND_LOG` instead."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage() != "Exceeded concurrency limit.":
            return True
        BOUND_LOG.hit("connections", f"open connections reached MIXROUTE_MAX_CONNECTIONS={self.limit}: new "
                                     "requests answered 503 and closed")
        return False


def quiet_uvicorn_limit_log(limit: int) -> None:
    """Install :class:`_UvicornLimitFilter` on uvicorn's error logger (once)."""
    logger = logging.getLogger("uvicorn.error")
    for old in [f for f in logger.filters if isinstance(f, _UvicornLimitFilter)]:
        logger.removeFilter(old)
    logger.addFilter(_UvicornLimitFilter(limit))
