"""DNS-rebinding guard: while auth is off, only loopback ``Host`` headers are served.

A gateway without auth trusts whoever can reach its loopback port. A web page can still
reach it through DNS rebinding: its own name (``rebind.attacker.example``) is made to
resolve to ``127.0.0.1``, and the browser then treats the gateway as the page's own origin
and reads its answers. The browser always sends the page's name as ``Host``, so refusing
every ``Host`` that is not a loopback name or address closes that door (Starlette's
``TrustedHostMiddleware`` does the same check, but for every request: here it applies only
while auth is off, and it answers in the door's envelope: Anthropic's below ``/v1/messages``, else OpenAI's). Names in ``MIXROUTE_ALLOWED_HOSTS``
are served too (a reverse proxy on the same host that keeps the public name, say).
With auth on, any ``Host`` is served: a page cannot present a key it does not have.

Errors::

    400 invalid_request_error  host_not_allowed
"""

from __future__ import annotations

import ipaddress
import logging

from starlette.requests import Request

from gateway.auth.guard import AuthUnavailable
from gateway.errors import envelope

log = logging.getLogger("mixroute.gateway")

LOOPBACK_NAMES = frozenset({"localhost", "localhost.", "ip6-localhost", "ip6-loopback"})


def host_name(host: str) -> str:
    """The name or address part of a ``Host`` header, lower case, without port or brackets."""
    host = host.strip().lower()
    if host.startswith("["):  # [::1]:8000
        return host[1:].partition("]")[0]
    if host.count(":") == 1:
        host = host.partition(":")[0]
    return host


def is_loopback_host(name: str) -> bool:
    """Whether ``name`` (from :func:`host_name`) is a loopback name or address."""
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def allowed(name: str, extra: tuple[str, ...]) -> bool:
    """Whether ``name`` is loopback or matches an entry of ``extra`` (``*`` matches any name,
    ``*.example.com`` any subdomain of ``example.com``)."""
    if is_loopback_host(name):
        return True
    for pattern in extra:
        if pattern == "*" or pattern == name or (pattern.startswith("*.") and name.endswith(pattern[1:])):
            return True
    return False


class LoopbackHostMiddleware:
    """Pure ASGI middleware: refuse a non-loopback, unlisted ``Host`` while auth is off.

    Args:
        app: the wrapped ASGI app.
        allowed_hosts: extra names served while auth is off (``MIXROUTE_ALLOWED_HOSTS``).
    """

    def __init__(self, app, allowed_hosts: list[str] | tuple[str, ...] = ()) -> None:
        self.app = app
        self.extra = tuple(h.strip().lower() for h in allowed_hosts if h.strip())

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        host = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), None)
        # No Host at all (HTTP/1.0) cannot come from a browser, so it cannot be a rebinding.
        if host is None or allowed(host_name(host), self.extra) or await self._auth_on(scope):
            return await self.app(scope, receive, send)
        log.warning("refused a request with Host %r: auth is off and it is not loopback (MIXROUTE_ALLOWED_HOSTS)",
                    host[:100])
        response = envelope(400, f"Host {host[:100]!r} is not served while auth is off (a web page could reach this "
                            "gateway through DNS rebinding): use localhost or 127.0.0.1, add the name to "
                            "MIXROUTE_ALLOWED_HOSTS, or set MIXROUTE_ADMIN_KEY", "invalid_request_error",
                            "host_not_allowed", "host", request=Request(scope))
        await response(scope, receive, send)

    @staticmethod
    async def _auth_on(scope) -> bool:
        auth = getattr(scope["app"].state, "auth", None)
        if auth is None:  # not started yet: nothing is served but health answers
            return False
        try:
            return await auth.required()
        except AuthUnavailable:
            return True  # the request itself then fails with the same 503 as any other
