"""Dashboard sessions: who may see what, and the signed session cookie.

Access::

    auth off (no admin key, no API key), client on loopback -> everything, no login
    otherwise                                   -> login form (POST the key once)
        admin key                               -> everything
        a tenant's API key                      -> that tenant's requests only

The cookie ``mixroute_dashboard`` holds ``base64url(json payload) "." hex(HMAC-SHA256)``;
it is HttpOnly, SameSite=Strict, scoped to ``/dashboard`` and expires after
:data:`SESSION_TTL_S`. It never contains a key: the payload is ``{"tenant", "admin",
"key_id", "sid", "exp"}``. The HMAC secret derives from the admin key, so every replica accepts
the same sessions and rotating the admin key ends them all; without an admin key the secret
is random per process. A tenant session also ends when its key is revoked (checked on each
API call).

Logout ends a session before its expiry: its ``sid`` (a random nonce per login) is put on a
revocation list until the cookie would have expired. The list lives in the process, and in
Redis when ``MIXROUTE_REDIS_URL`` is set, so that a logout on one replica ends the session on
every replica sharing that Redis; without Redis, only the replica that served the logout
forgets the session (the browser drops the cookie either way).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import json
import logging
import os
import secrets
import time
from dataclasses import dataclass

log = logging.getLogger("mixroute.dashboard")

COOKIE = "mixroute_dashboard"
SESSION_TTL_S = 12 * 3600
"""Session lifetime (seconds)."""


@dataclass(frozen=True)
class Viewer:
    """Who looks at the dashboard. ``tenant`` ``None`` with ``admin``: all tenants."""

    admin: bool
    tenant: str | None = None
    key_id: str | None = None
    sid: str | None = None
    exp: float = 0.0

    @property
    def scope(self) -> str | None:
        """The tenant the data is limited to (``None``: every tenant)."""
        return None if self.admin else self.tenant


class Sessions:
    """Signs, checks and revokes session cookies.

    Args:
        admin_key: ``MIXROUTE_ADMIN_KEY``; ``None`` uses a random per-process secret.
        ttl_s: session lifetime (seconds).
        revoked: the revocation list shared by replicas (``None``: this process only).
    """

    def __init__(self, admin_key: str | None, ttl_s: float = SESSION_TTL_S,
                 revoked: "RedisRevocations | None" = None) -> None:
        base = admin_key.encode() if admin_key else os.urandom(32)
        self._secret = hmac.new(base, b"mixroute-dashboard-session-v1", hashlib.sha256).digest()
        self.ttl_s = ttl_s
        self._revoked: dict[str, float] = {}  # sid -> when its cookie expires anyway
        self.shared = revoked

    def issue(self, viewer: Viewer, now: float | None = None) -> str:
        payload = {"tenant": viewer.tenant, "admin": viewer.admin, "key_id": viewer.key_id,
                   "sid": secrets.token_urlsafe(16), "exp": int((now or time.time()) + self.ttl_s)}
        body = base64.urlsafe_b64encode(json.dumps(payload, separators=(",", ":")).encode()).decode().rstrip("=")
        return f"{body}.{self._sign(body)}"

    def verify(self, cookie: str | None, now: float | None = None) -> Viewer | None:
        """The viewer of a validly signed, unexpired cookie (revoked or not), else ``None``."""
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
        return Viewer(admin=bool(payload.get("admin")), tenant=payload.get("tenant"), key_id=payload.get("key_id"),
                      sid=payload.get("sid"), exp=float(payload["exp"]))

    async def check(self, cookie: str | None, now: float | None = None) -> Viewer | None:
        """The viewer of a valid, unexpired, not revoked cookie, else ``None``."""
        v = self.verify(cookie, now)
        if v is None or v.sid is None:  # a cookie without a sid cannot be revoked: not accepted
            return None
        if v.sid in self._revoked or (self.shared is not None and await self.shared.contains(v.sid)):
            return None
        return v

    async def revoke(self, viewer: Viewer, now: float | None = None) -> None:
        """End ``viewer``'s session here and, with Redis, on every replica."""
        if viewer.sid is None:
            return
        now = now or time.time()
        self._revoked = {sid: exp for sid, exp in self._revoked.items() if exp >= now}
        self._revoked[viewer.sid] = viewer.exp
        if self.shared is not None:
            await self.shared.add(viewer.sid, viewer.exp - now)

    async def aclose(self) -> None:
        if self.shared is not None:
            await self.shared.aclose()

    def _sign(self, body: str) -> str:
        return hmac.new(self._secret, body.encode(), hashlib.sha256).hexdigest()


class RedisRevocations:
    """Revoked session ids in Redis (``<prefix>:dashboard:revoked:<sid>``, expiring with the
    cookie). Redis unreachable: the process's own list still applies, and a warning is logged.

    Args:
        url: ``MIXROUTE_REDIS_URL``.
        prefix: ``MIXROUTE_REDIS_PREFIX``.
        timeout_s: longest wait for one Redis call (seconds).
    """

    def __init__(self, url: str, prefix: str, timeout_s: float) -> None:
        import redis.asyncio as aioredis

        self._redis = aioredis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
        self._prefix = f"{prefix}:dashboard:revoked:"

    async def add(self, sid: str, ttl_s: float) -> None:
        try:
            await self._redis.set(self._prefix + sid, b"1", ex=max(1, int(ttl_s) + 1))
        except Exception as exc:  # redis-py raises many kinds (connection, timeout, response)
            log.warning("dashboard: logout not shared with other replicas, redis unavailable (%s)",
                        type(exc).__name__)

    async def contains(self, sid: str) -> bool:
        try:
            return bool(await self._redis.exists(self._prefix + sid))
        except Exception as exc:
            log.warning("dashboard: revoked sessions of other replicas unknown, redis unavailable (%s)",
                        type(exc).__name__)
            return False

    async def aclose(self) -> None:
        await self._redis.aclose()


def is_loopback(host: str | None) -> bool:
    """Whether a client address is a loopback address (``127.0.0.0/8``, ``::1``)."""
    if not host:
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
