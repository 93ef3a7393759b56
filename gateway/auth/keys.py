"""The ``api_keys`` table: create, list, revoke and look up keys (synchronous SQLAlchemy;
the gateway calls it from a thread, see :mod:`gateway.auth.cache`)."""

from __future__ import annotations

import hashlib
import secrets
import uuid
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Literal

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from gateway.auth.models import ApiKey, Tenant

Period = Literal["day", "month", "total"]
KEY_PREFIX = "mr-"
#: Upper bound accepted for a budget (USD): larger values are almost surely a typo.
MAX_BUDGET_USD = 10_000_000.0


class KeyError_(ValueError):
    """Invalid key parameters (negative or absurd budget, bad limits); ``param`` names the
    field at fault (the admin API's error ``param``)."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class KeyInfo:
    """A stored key (never the key itself).

    Attributes:
        key_id: stable id; prefix: the first 8 characters of the key, for display.
        tenant: tenant name. budget_usd / period: USD budget of this key per ``period``.
        rpm / tpm: requests and tokens per minute allowed for this key (``None``: unlimited).
        routes: routes and backends this key may use (empty: all).
        tenant_budget_usd / tenant_period: the tenant's own budget, shared by all its keys
            (``mixroute tenants set``); ``None``: no tenant budget.
    """

    key_id: str
    prefix: str
    tenant: str
    budget_usd: float | None = None
    period: Period = "month"
    rpm: int | None = None
    tpm: int | None = None
    routes: tuple[str, ...] = field(default_factory=tuple)
    created_at: datetime | None = None
    revoked_at: datetime | None = None
    tenant_budget_usd: float | None = None
    tenant_period: Period = "month"


def hash_key(key: str) -> str:
    """Hex SHA-256 of a key."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


MAX_PER_MINUTE = 2**31 - 1
"""Largest ``rpm``/``tpm`` a key can hold (the store's 32-bit integer column on PostgreSQL)."""


def validate_limits(budget_usd: float | None, rpm: int | None, tpm: int | None) -> None:
    """Raises :class:`KeyError_` with a clear message for impossible limits."""
    if budget_usd is not None and not (0 <= budget_usd <= MAX_BUDGET_USD):
        raise KeyError_(f"--budget-usd must be between 0 and {MAX_BUDGET_USD:,.0f} USD, got {budget_usd}",
                        param="budget_usd")
    for name, value in (("--rpm", rpm), ("--tpm", tpm)):
        if value is not None and not 1 <= value <= MAX_PER_MINUTE:
            raise KeyError_(f"{name} must be a positive integer of at most {MAX_PER_MINUTE:,}, got {value}",
                            param=name.removeprefix("--"))


def create_key(engine: Engine, tenant: str, *, budget_usd: float | None = None, period: Period = "month",
               rpm: int | None = None, tpm: int | None = None, routes: list[str] | None = None) -> tuple[str, KeyInfo]:
    """Create a key for ``tenant``; returns ``(plaintext_key, info)``. The plaintext is not stored.

    Raises:
        KeyError_: invalid limits or empty tenant.
    """
    if not tenant.strip():
        raise KeyError_("--tenant must not be empty")
    validate_limits(budget_usd, rpm, tpm)
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    info = KeyInfo(key_id=uuid.uuid4().hex[:12], prefix=key[:8], tenant=tenant, budget_usd=budget_usd, period=period,
                   rpm=rpm, tpm=tpm, routes=tuple(routes or ()), created_at=datetime.now(timezone.utc))
    with engine.begin() as conn:
        conn.execute(sa.insert(ApiKey).values(
            key_id=info.key_id, key_hash=hash_key(key), prefix=info.prefix, tenant=tenant, budget_usd=budget_usd,
            period=period, rpm=rpm, tpm=tpm, routes=list(info.routes), created_at=info.created_at))
    return key, info


def _info(row) -> KeyInfo:
    return KeyInfo(key_id=row.key_id, prefix=row.prefix, tenant=row.tenant, budget_usd=row.budget_usd,
                   period=row.period, rpm=row.rpm, tpm=row.tpm, routes=tuple(row.routes or ()),
                   created_at=row.created_at, revoked_at=row.revoked_at)


def list_keys(engine: Engine, tenant: str | None = None, include_revoked: bool = False) -> list[KeyInfo]:
    """Keys, newest first."""
    q = sa.select(ApiKey).order_by(ApiKey.created_at.desc())
    if tenant:
        q = q.where(ApiKey.tenant == tenant)
    if not include_revoked:
        q = q.where(ApiKey.revoked_at.is_(None))
    with engine.connect() as conn:
        return [_info(r) for r in conn.execute(q)]


def revoke_key(engine: Engine, key_id_or_prefix: str) -> int:
    """Revoke by id or display prefix; returns the number of keys revoked (0 or 1).

    Raises:
        KeyError_: the prefix matches more than one key.
    """
    with engine.begin() as conn:
        ids = conn.execute(sa.select(ApiKey.key_id).where(
            sa.or_(ApiKey.key_id == key_id_or_prefix, ApiKey.prefix == key_id_or_prefix),
            ApiKey.revoked_at.is_(None))).scalars().all()
        if len(ids) > 1:
            raise KeyError_(f"'{key_id_or_prefix}' matches {len(ids)} keys; revoke by key id")
        if ids:
            conn.execute(sa.update(ApiKey).where(ApiKey.key_id == ids[0]).values(revoked_at=datetime.now(timezone.utc)))
        return len(ids)


def get_key(engine: Engine, key_id: str) -> KeyInfo | None:
    """The key with this id (revoked or not), or ``None``."""
    with engine.connect() as conn:
        row = conn.execute(sa.select(ApiKey).where(ApiKey.key_id == key_id)).first()
    return None if row is None else _info(row)


def find_key(engine: Engine, key: str) -> KeyInfo | None:
    """The active key with this plaintext (with its tenant's budget), or ``None``."""
    with engine.connect() as conn:
        row = conn.execute(sa.select(ApiKey).where(ApiKey.key_hash == hash_key(key),
                                                   ApiKey.revoked_at.is_(None))).first()
        if row is None:
            return None
        tenant = conn.execute(sa.select(Tenant).where(Tenant.name == row.tenant)).first()
    info = _info(row)
    if tenant is not None and tenant.budget_usd is not None:
        info = replace(info, tenant_budget_usd=tenant.budget_usd, tenant_period=tenant.period)
    return info


def set_tenant_budget(engine: Engine, tenant: str, budget_usd: float | None, period: Period = "month") -> None:
    """Create or update a tenant's budget (``None`` removes it: the tenant's record goes, so
    ``tenants list`` shows only tenants with a budget).

    Raises:
        KeyError_: negative or absurd budget.
    """
    validate_limits(budget_usd, None, None)
    now = datetime.now(timezone.utc)
    with engine.begin() as conn:
        if budget_usd is None:
            conn.execute(sa.delete(Tenant).where(Tenant.name == tenant))
            return
        updated = conn.execute(sa.update(Tenant).where(Tenant.name == tenant).values(
            budget_usd=budget_usd, period=period, updated_at=now)).rowcount
        if not updated:
            conn.execute(sa.insert(Tenant).values(name=tenant, budget_usd=budget_usd, period=period, updated_at=now))


def list_tenants(engine: Engine) -> list[tuple[str, float | None, str]]:
    """``(name, budget_usd, period)`` of every tenant with a budget record."""
    with engine.connect() as conn:
        return [(r.name, r.budget_usd, r.period) for r in conn.execute(sa.select(Tenant).order_by(Tenant.name))]


def any_keys(engine: Engine) -> bool:
    """Whether any key was ever created. Auth is required as soon as one was; revoked
    keys count too, so revoking the last key never silently opens the gateway."""
    with engine.connect() as conn:
        return conn.execute(sa.select(ApiKey.key_id).limit(1)).first() is not None
