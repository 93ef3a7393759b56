"""Dashboard sessions: who may see what, and the signed session cookie.

Access::

    auth off (no admin key, no API key), client on loopback -> everything, no login
    otherwise                                   -> login form (POST the key once)
        admin key                               -> everything
        a tenant's API key                      -> that tenant's requests only

The cookie ``mixroute_dashboard`` holds ``base64url(json payload) "." hex(HMAC-SHA256)``;
it is HttpOnly, SameSite=Strict, scoped to ``/dashboard`` and expires after
:data:`SESSION_TTL_S`. It never contains a key: the payload is ``{"tenant", "admin",
"key_id", "exp"}``. The HMAC secret derives from the admin key, so every replica accepts
the same sessions and rotating the admin key ends them all; without an admin key the secret
is random per process. A tenant session also ends when its key is revoked (checked on each
API call).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import json
import os
import time
from dataclasses import dataclass

COOKIE = "mixroute_dashboard"
SESSION_TTL_S = 12 * 3600
"""Session lifetime (seconds)."""


@dataclass(frozen=True)
class Viewer:
    """Who looks at the dashboard. ``tenant`` ``None`` with ``admin``: all tenants."""

    admin: bool
    tenant: str | None = None
    key_id: str | None = None

    @property
    def scope(self) -> str | None:
        """The tenant the data is limited to (``None``: every tenant)."""
        return None if self.admin else self.tenant


class Sessions:
    """Signs and checks session cookies.

    Args:
        admin_key: ``MIXROUTE_ADMIN_KEY``; ``None`` uses a random per-process secret.
        ttl_s: session lifetime (seconds).
    """

    def __init__(self, admin_key: str | None, ttl_s: float = SESSION_TTL_S) -> None:
        base = admin_key.encode() if admin_key else os.urandom(32)
        self._secret = hmac.new(base, b"mixroute-dashboard-session-v1", hashlib.sha256).digest()
        self.ttl_s = ttl_s

    def issue(self, viewer: Viewer, now: float | None = None) -> str:
        payload = {"tenant": viewer.tenant, "admin": viewer.admin, "key_id": viewer.key_id,
                   "exp": int((now or time.time()) + self.ttl_s)}
        body = base64.urlsafe_b64encode(json.dumps(payload, separators=(",", ":")).encode()).decode().rstrip("=")
        return f"{body}.{self._sign(body)}"

    def check(self, cookie: str | None, now: float | None = None) -> Viewer | None:
        """The viewer of a valid, unexpired cookie, else ``None``."""
        if not cookie or "." not in cookie:
            return None
        body, _, sig = cookie.rpartition(".")
        if not hmac.compare_digest(sig, self._sign(body)):
            return None
        try:
            payload = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        except ValueError:
            return None
        if not isinstance(payload, dict) or payload.get("exp", 0) < (now or time.time()):
            return None
        return Viewer(admin=bool(payload.get("admin")), tenant=payload.get("tenant"), key_id=payload.get("key_id"))

    def _sign(self, body: str) -> str:
        return hmac.new(self._secret, body.encode(), hashlib.sha256).hexdigest()


def is_loopback(host: str | None) -> bool:
    """Whether a client address is a loopback address (``127.0.0.0/8``, ``::1``)."""
    if not host:
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
