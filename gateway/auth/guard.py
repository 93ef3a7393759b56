"""Request authentication: ``Authorization: Bearer <key>`` (or ``api-key`` / ``x-api-key``).

Auth is required as soon as ``MIXROUTE_ADMIN_KEY`` is set or any key exists. Key lookups
go through an in-memory cache (``ttl_s``, 5 s by default: a revoked key stops working
within that time on every replica) and, on a miss, to the database in a worker thread, so
no synchronous database call runs on the event loop.

Errors::

    AuthError        401 authentication_error  invalid_api_key
    PermissionDenied 403 permission_error      model_not_allowed
    AuthUnavailable  503 api_error             auth_unavailable  (key store unreachable)
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from dataclasses import dataclass

from backends.errors import MixrouteError
from gateway.auth.keys import KeyInfo, any_keys, find_key, hash_key

log = logging.getLogger(__name__)


class AuthError(MixrouteError):
    status = 401
    type = "authentication_error"
    code = "invalid_api_key"


class AuthUnavailable(MixrouteError):
    status = 503
    code = "auth_unavailable"


class PermissionDenied(MixrouteError):
    status = 403
    type = "permission_error"
    code = "model_not_allowed"


@dataclass(frozen=True)
class Principal:
    """Who is calling. ``tenant`` is ``None`` when auth is off; ``admin`` for the admin key."""

    tenant: str | None = None
    key: KeyInfo | None = None
    admin: bool = False

    def check_model(self, model: str) -> None:
        """Raises :class:`PermissionDenied` if the key, or its tenant, is limited to other
        routes/backends."""
        if self.key is None:
            return
        if self.key.routes and model not in self.key.routes:
            raise PermissionDenied(f"This key may only use: {', '.join(self.key.routes)}", param="model")
        if self.key.tenant_routes and model not in self.key.tenant_routes:
            raise PermissionDenied(f"This tenant may only use: {', '.join(self.key.tenant_routes)}", param="model")


OPEN = Principal()
ADMIN = Principal(tenant="admin", admin=True)


def presented_key(headers) -> str | None:
    """The key a client presented, or ``None``."""
    auth = headers.get("authorization")
    if auth:
        scheme, _, value = auth.partition(" ")
        return value.strip() if scheme.lower() == "bearer" and value.strip() else None
    return headers.get("api-key") or headers.get("x-api-key")


class Authenticator:
    """Resolves requests to principals.

    Args:
        engine: SQLAlchemy engine of the store (``None``: no keys can exist).
        admin_key: ``MIXROUTE_ADMIN_KEY``.
        ttl_s: cache lifetime of lookups (seconds).
    """

    def __init__(self, engine, admin_key: str | None, ttl_s: float = 5.0):
        self.engine = engine
        self.admin_key = admin_key
        self.ttl_s = ttl_s
        self._cache: dict[str, tuple[KeyInfo | None, float]] = {}
        self._inflight: dict[str, asyncio.Future] = {}
        self._required: tuple[bool, float] = (False, 0.0)
        self._known_required: bool | None = None  # the store's last answer to "any keys?"

    async def required(self) -> bool:
        """Whether requests must carry a key (admin key set, or any active key exists)."""
        if self.admin_key:
            return True
        value, expires = self._required
        if time.monotonic() >= expires:
            known = self._known_required
            try:
                value = await asyncio.to_thread(self._any_keys)
            except Exception as exc:
                # The store cannot say whether keys exist: keep its last answer (keys once
                # required stay required), and fail closed when it never answered. Answering
                # "no keys" here opened a keyed gateway to anyone during a database outage.
                if known is None:
                    raise AuthUnavailable("API keys cannot be checked right now; try again shortly") from exc
                log.warning("auth: the store is unreachable (%s); keeping its last answer", type(exc).__name__)
                value = known
            self._known_required = value
            self._required = (value, time.monotonic() + self.ttl_s)
        return value

    def _any_keys(self) -> bool:
        return False if self.engine is None else any_keys(self.engine)

    async def authenticate(self, headers) -> Principal:
        """The principal of a request.

        Raises:
            AuthError: a key is required and missing, malformed, unknown or revoked.
        """
        key = presented_key(headers)
        if not await self.required():
            return OPEN
        if not key and headers.get("authorization"):
            # Never echoed: the header may be the bare key itself.
            raise AuthError("The Authorization header is not of the form 'Bearer <key>': "
                            "send 'Authorization: Bearer <key>'")
        if not key:
            raise AuthError("Missing API key: send 'Authorization: Bearer <key>'")
        if self.admin_key and hmac.compare_digest(key.encode(), self.admin_key.encode()):
            return ADMIN
        info = await self._lookup(key)
        if info is None:
            raise AuthError("Invalid or revoked API key")  # never echo the key
        return Principal(tenant=info.tenant, key=info)

    def require_admin(self, principal: Principal) -> None:
        """Raises :class:`AuthError` unless ``principal`` holds the admin key (or auth is open
        with no admin key configured)."""
        if principal.admin or (principal is OPEN and not self.admin_key):
            return
        raise AuthError("This endpoint needs the admin key (MIXROUTE_ADMIN_KEY)")

    async def _lookup(self, key: str) -> KeyInfo | None:
        key_hash = hash_key(key)  # the cache never holds plaintext keys
        cached = self._cache.get(key_hash)
        if cached and time.monotonic() < cached[1]:
            return cached[0]
        # Single flight: a burst of requests with one uncached key makes one database query.
        pending = self._inflight.get(key_hash)
        if pending is None:
            pending = asyncio.ensure_future(self._fetch(key, key_hash))
            self._inflight[key_hash] = pending
            pending.add_done_callback(lambda _: self._inflight.pop(key_hash, None))
        return await asyncio.shield(pending)

    async def _fetch(self, key: str, key_hash: str) -> KeyInfo | None:
        if self.engine is None:
            return None
        try:
            info = await asyncio.to_thread(find_key, self.engine, key)
        except Exception as exc:  # database unreachable or locked: a clear 503, never a 500
            stale = self._cache.get(key_hash)
            if stale is None:
                raise AuthUnavailable("API keys cannot be checked right now; try again shortly") from exc
            # A key seen before keeps its last known state through the outage (checked
            # again every ttl_s), so a database outage does not stop keyed traffic; a key
            # revoked during the outage works until the store answers again.
            log.warning("auth: the store is unreachable (%s); using a key's last known state", type(exc).__name__)
            self._cache[key_hash] = (stale[0], time.monotonic() + self.ttl_s)
            return stale[0]
        if len(self._cache) > 100_000:
            self._cache.clear()
        self._cache[key_hash] = (info, time.monotonic() + self.ttl_s)
        return info
