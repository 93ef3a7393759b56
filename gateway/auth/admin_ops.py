"""Key and tenant administration, with spend so far and budget left: the one implementation
behind the admin API (:mod:`gateway.api.admin`) and the ``mixroute keys`` / ``mixroute
tenants`` commands. Synchronous SQLAlchemy; the gateway calls it from a worker thread.

Spend is what the store recorded (:func:`gateway.store.spend.spend_by_subject`): outcome
costs of the requests decided since the start of the budget's current period (UTC day,
UTC month, or ever for ``total``). It lags the traffic by the store writer's flush
interval, and it is the same figure on every gateway that shares the database.

Errors: :class:`gateway.auth.keys.KeyError_` (invalid input, ``param`` names the field) and
:class:`NotFound` (no such key or tenant).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from datetime import datetime, timezone

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from backends.fields import NAME_PATTERN
from gateway.auth import keys as store_keys
from gateway.auth.keys import KeyError_, KeyInfo, Period
from gateway.auth.models import ApiKey, Tenant
from gateway.limits.base import period_start
from gateway.store.spend import spend_by_subject

MAX_TENANT_CHARS = 128
#: Tenant names the gateway itself uses: a key's tenant with one of them would share its
#: logs, dashboard view, feedback rights and metrics labels.
RESERVED_TENANTS = {"admin": "the admin key's requests are logged as tenant 'admin'",
                    "-": "metrics label requests made with auth off as tenant '-'"}
PERIODS = ("day", "month", "total")


class NotFound(LookupError):
    """No active key, or no tenant, by that name."""


@dataclass(frozen=True)
class Spend:
    """A budget's state in its current period (USD). ``left_usd`` is ``None`` without a budget."""

    budget_usd: float | None
    period: str
    since: datetime
    spent_usd: float

    @property
    def left_usd(self) -> float | None:
        return None if self.budget_usd is None else max(0.0, self.budget_usd - self.spent_usd)

    def as_dict(self) -> dict:
        return {"budget_usd": self.budget_usd, "period": self.period, "period_start": _iso(self.since),
                "spent_usd": round(self.spent_usd, 10),
                "left_usd": None if self.left_usd is None else round(self.left_usd, 10)}


def check_tenant_name(name: str, param: str = "tenant") -> None:
    """Raises :class:`KeyError_` for an empty, padded, reserved, over-long tenant name, one
    with control characters (they would corrupt terminal output and log lines), or one that
    cannot be a URL path segment. The one rule for a key's tenant and a tenant's name, in
    the admin API and the CLI alike."""
    if not name.strip() or all(unicodedata.category(c) in ("Cf", "Zs", "Zl", "Zp") for c in name):
        raise KeyError_(f"{param} must not be empty (or only invisible characters)", param=param)
    if name != name.strip():
        raise KeyError_(f"{param} must not start or end with whitespace, got {name!r}", param=param)
    if name in RESERVED_TENANTS:
        raise KeyError_(f"{param} {name!r} is reserved: {RESERVED_TENANTS[name]}", param=param)
    if len(name) > MAX_TENANT_CHARS:
        raise KeyError_(f"{param} must be at most {MAX_TENANT_CHARS} characters, got {len(name)}", param=param)
    bad = sorted({c for c in name if unicodedata.category(c) == "Cc"})
    if bad:
        raise KeyError_(f"{param} must not contain control characters, found "
                        f"{', '.join(f'U+{ord(c):04X}' for c in bad)}", param=param)
    # A tenant is addressed as /v1/admin/tenants/{name}: a '/' (even sent as %2F, which the
    # server decodes before routing) or a dot segment, which clients collapse, could never
    # reach it there, so it could be created but not read, changed or deleted.
    if "/" in name or name in (".", ".."):
        raise KeyError_(f"{param} must not contain '/' or be '.' or '..' (it is a path segment in "
                        f"/v1/admin/tenants/{{name}}), got {name!r}", param=param)


def check_routes(routes: list[str] | None, known: list[str] | None, param: str = "routes") -> None:
    """Raises :class:`KeyError_` for a route name no policy could hold (empty, with a comma,
    outside :data:`backends.fields.NAME_PATTERN`) or, when ``known`` is given, one that is
    neither a route nor a backend of that policy."""
    for name in routes or ():
        if not name.strip():
            raise KeyError_(f"{param} must name a route or backend, not an empty string", param=param)
        if "," in name:
            raise KeyError_(f"{param} {name!r} is not one route or backend name; give each one separately",
                            param=param)
        if not re.fullmatch(NAME_PATTERN, name):
            raise KeyError_(f"{param} {name!r} cannot be a route or backend name (letters, digits and ._:/@-, "
                            "starting with a letter or digit)", param=param)
    unknown = [r for r in routes or () if known is not None and r not in known]
    if unknown:
        raise KeyError_(f"{param} {', '.join(map(repr, unknown))}: not a route or backend of the policy "
                        f"(known: {', '.join(known or ())})", param=param)


def check_period(period: str) -> None:
    if period not in PERIODS:
        raise KeyError_(f"period must be day, month or total, got {period!r}", param="period")


class SpendBook:
    """Spend per key id and per tenant, read once per period kind and reused for a listing."""

    def __init__(self, engine: Engine, now: datetime | None = None) -> None:
        self.engine = engine
        self.now = now or datetime.now(timezone.utc)
        self._cache: dict[str, tuple[dict[str, float], dict[str, float]]] = {}

    def _by(self, period: str) -> tuple[dict[str, float], dict[str, float]]:
        if period not in self._cache:
            self._cache[period] = spend_by_subject(self.engine, self.since(period))
        return self._cache[period]

    def since(self, period: str) -> datetime:
        return period_start(period, self.now.timestamp())

    def key(self, key_id: str, budget_usd: float | None, period: str) -> Spend:
        return Spend(budget_usd, period, self.since(period), self._by(period)[0].get(key_id, 0.0))

    def tenant(self, name: str, budget_usd: float | None, period: str) -> Spend:
        return Spend(budget_usd, period, self.since(period), self._by(period)[1].get(name, 0.0))


def key_view(info: KeyInfo, book: SpendBook) -> dict:
    """A key as the admin API and ``keys list --json`` show it (never the key itself)."""
    return {"object": "mixroute.key", "key_id": info.key_id, "prefix": info.prefix, "tenant": info.tenant,
            "rpm": info.rpm, "tpm": info.tpm, "routes": list(info.routes),
            "created_at": _iso(info.created_at), "revoked_at": _iso(info.revoked_at),
            **book.key(info.key_id, info.budget_usd, info.period).as_dict()}


def list_key_views(engine: Engine, tenant: str | None = None, include_revoked: bool = False) -> list[dict]:
    """Keys, newest first, each with its spend and budget left this period."""
    book = SpendBook(engine)
    return [key_view(k, book) for k in store_keys.list_keys(engine, tenant, include_revoked)]


def get_key_view(engine: Engine, key_id: str) -> dict:
    """One key (revoked ones too) by id.

    Raises:
        NotFound: no key with that id.
    """
    return key_view(_key(engine, key_id), SpendBook(engine))


def create_key(engine: Engine, tenant: str, *, budget_usd: float | None = None, period: str = "month",
               rpm: int | None = None, tpm: int | None = None, routes: list[str] | None = None,
               known_routes: list[str] | None = None) -> tuple[str, dict]:
    """Create a key; returns ``(plaintext key, view)``. The plaintext is never stored.

    Raises:
        KeyError_: a bad tenant name, period, limit or route.
    """
    check_tenant_name(tenant)
    check_period(period)
    check_routes(routes, known_routes)
    key, info = store_keys.create_key(engine, tenant, budget_usd=budget_usd, period=period,  # type: ignore[arg-type]
                                      rpm=rpm, tpm=tpm, routes=routes)
    return key, key_view(info, SpendBook(engine))


_KEY_FIELDS = ("budget_usd", "period", "rpm", "tpm", "routes")


def update_key(engine: Engine, key_id: str, changes: dict, known_routes: list[str] | None = None) -> dict:
    """Change an active key's ``budget_usd``, ``period``, ``rpm``, ``tpm`` or ``routes`` (a
    ``None`` value removes the limit; ``routes`` ``None`` or ``[]``: every route). Gateways
    apply it within the key cache TTL.

    Raises:
        KeyError_: an unknown field or a bad value. NotFound: no active key with that id.
    """
    unknown = set(changes) - set(_KEY_FIELDS)
    if unknown:
        raise KeyError_(f"cannot change {', '.join(sorted(unknown))} (changeable: {', '.join(_KEY_FIELDS)})",
                        param=sorted(unknown)[0])
    current = _key(engine, key_id)
    if current.revoked_at is not None:
        raise NotFound(f"key {key_id} is revoked")
    merged = {f: getattr(current, f) for f in _KEY_FIELDS} | changes
    merged["period"] = merged["period"] or "month"
    check_period(merged["period"])
    store_keys.validate_limits(merged["budget_usd"], merged["rpm"], merged["tpm"])
    check_routes(changes.get("routes"), known_routes)
    merged["routes"] = list(merged["routes"] or ())
    with engine.begin() as conn:
        conn.execute(sa.update(ApiKey).where(ApiKey.key_id == key_id).values(**merged))
    return get_key_view(engine, key_id)


def revoke_key(engine: Engine, key_id: str) -> dict:
    """Revoke an active key by id (or display prefix); returns its view.

    Raises:
        NotFound: no active key by that id or prefix. KeyError_: the prefix is ambiguous.
    """
    with engine.connect() as conn:
        key_ids = conn.execute(sa.select(ApiKey.key_id).where(
            sa.or_(ApiKey.key_id == key_id, ApiKey.prefix == key_id), ApiKey.revoked_at.is_(None))).scalars().all()
    if not store_keys.revoke_key(engine, key_id):
        raise NotFound(f"no active key {key_id!r}")
    return get_key_view(engine, key_ids[0])


def _key(engine: Engine, key_id: str) -> KeyInfo:
    info = store_keys.get_key(engine, key_id)
    if info is None:
        raise NotFound(f"no key {key_id!r}")
    return info


# -- tenants --------------------------------------------------------------------------------

@dataclass(frozen=True)
class TenantLimits:
    """A tenant's own limits, shared by all its keys (``None`` / empty: none)."""

    budget_usd: float | None = None
    period: str = "month"
    rpm: int | None = None
    tpm: int | None = None
    routes: tuple[str, ...] = ()


TENANT_FIELDS = ("budget_usd", "period", "rpm", "tpm", "routes")


def tenant_view(name: str, limits: TenantLimits, active_keys: int, book: SpendBook) -> dict:
    return {"object": "mixroute.tenant", "name": name, "keys": active_keys, "rpm": limits.rpm, "tpm": limits.tpm,
            "routes": list(limits.routes), **book.tenant(name, limits.budget_usd, limits.period).as_dict()}


def list_tenant_views(engine: Engine) -> list[dict]:
    """Every tenant with a record or an active key, by name, with its limits, spend and
    budget left this period (``left_usd`` ``None``: no tenant budget)."""
    with engine.connect() as conn:
        records = {r.name: TenantLimits(r.budget_usd, r.period, r.rpm, r.tpm, tuple(r.routes or ()))
                   for r in conn.execute(sa.select(Tenant))}
        counts = dict(conn.execute(sa.select(ApiKey.tenant, sa.func.count()).where(ApiKey.revoked_at.is_(None))
                                   .group_by(ApiKey.tenant)).all())
    book = SpendBook(engine)
    return [tenant_view(name, records.get(name, TenantLimits()), counts.get(name, 0), book)
            for name in sorted(set(records) | set(counts))]


def get_tenant_view(engine: Engine, name: str) -> dict:
    """One tenant.

    Raises:
        NotFound: no record and no active key for ``name``.
    """
    found = [t for t in list_tenant_views(engine) if t["name"] == name]
    if not found:
        raise NotFound(f"no tenant {name!r}")
    return found[0]


def put_tenant(engine: Engine, name: str, limits: TenantLimits, known_routes: list[str] | None = None) -> dict:
    """Create or replace a tenant's record with ``limits`` (its keys' own limits are
    unchanged; a request counts against both).

    Raises:
        KeyError_: a bad name, period, limit or route.
    """
    check_tenant_name(name, "name")
    check_period(limits.period)
    store_keys.validate_limits(limits.budget_usd, limits.rpm, limits.tpm)
    check_routes(list(limits.routes), known_routes)
    now = datetime.now(timezone.utc)
    values = {"budget_usd": limits.budget_usd, "period": limits.period, "rpm": limits.rpm, "tpm": limits.tpm,
              "routes": list(limits.routes) or None, "updated_at": now}
    with engine.begin() as conn:
        if not conn.execute(sa.update(Tenant).where(Tenant.name == name).values(**values)).rowcount:
            conn.execute(sa.insert(Tenant).values(name=name, **values))
    return get_tenant_view(engine, name)


def update_tenant(engine: Engine, name: str, changes: dict, known_routes: list[str] | None = None) -> dict:
    """Change some of a tenant's limits (``None`` removes one).

    Raises:
        KeyError_: an unknown field or a bad value. NotFound: no such tenant.
    """
    unknown = set(changes) - set(TENANT_FIELDS)
    if unknown:
        raise KeyError_(f"cannot change {', '.join(sorted(unknown))} (changeable: {', '.join(TENANT_FIELDS)})",
                        param=sorted(unknown)[0])
    current = get_tenant_view(engine, name)
    merged = {f: current[f] for f in TENANT_FIELDS} | changes
    return put_tenant(engine, name, TenantLimits(merged["budget_usd"], merged["period"] or "month", merged["rpm"],
                                                 merged["tpm"], tuple(merged["routes"] or ())),
                      known_routes if "routes" in changes else None)


def delete_tenant(engine: Engine, name: str) -> dict:
    """Revoke every active key of ``name`` and remove its record; returns its last view.

    Raises:
        NotFound: no such tenant.
    """
    view = get_tenant_view(engine, name)
    now = datetime.now(timezone.utc)
    with engine.begin() as conn:
        conn.execute(sa.update(ApiKey).where(ApiKey.tenant == name, ApiKey.revoked_at.is_(None))
                     .values(revoked_at=now))
        conn.execute(sa.delete(Tenant).where(Tenant.name == name))
    return {**view, "keys": 0, "deleted": True}


def tenant_budgets(engine: Engine) -> list[tuple[str, Spend]]:
    """``(tenant, spend)`` for each tenant with a budget (the budget-left gauge)."""
    with engine.connect() as conn:
        rows = conn.execute(sa.select(Tenant).where(Tenant.budget_usd.is_not(None)).order_by(Tenant.name))
        budgets = [(r.name, r.budget_usd, r.period) for r in rows]
    book = SpendBook(engine)
    return [(name, book.tenant(name, budget, period)) for name, budget, period in budgets]


def _iso(t: datetime | None) -> str | None:
    return None if t is None else t.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


__all__ = ["NotFound", "Spend", "SpendBook", "KeyError_", "Period", "check_tenant_name", "check_routes",
           "create_key", "update_key", "revoke_key", "list_key_views", "get_key_view", "list_tenant_views",
           "get_tenant_view", "put_tenant", "update_tenant", "delete_tenant", "tenant_budgets", "TenantLimits"]
