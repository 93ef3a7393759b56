"""What the store recorded a key or a tenant spending: the seed of its budget counter
(:meth:`gateway.limits.base.Limiter.seed_budget`)."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy import Engine

from gateway.limits.base import TENANT_SUBJECT
from gateway.store.models import Decision, Outcome


def recorded_spend(engine: Engine | None, subject: str, since: datetime, before: datetime | None = None) -> float:
    """USD of the outcomes of the requests of ``subject`` (a limits subject: ``tenant:<name>``
    for a tenant, else a key id) decided at or after ``since`` (UTC), as written so far (rows
    still queued in the writer are not counted; decisions from before migration 0006 have no
    key id); with ``before``, only outcomes recorded before it (``outcomes.created_at``: the
    store's part of a rebuilt budget counter, :mod:`gateway.limits.recent`).

    Raises:
        RuntimeError: the store has no engine (it never started).
        sqlalchemy.exc.SQLAlchemyError: the database cannot be read.
    """
    if engine is None:
        raise RuntimeError("the store has not started")
    query = (sa.select(sa.func.coalesce(sa.func.sum(Outcome.cost_usd), 0.0))
             .select_from(Outcome).join(Decision, Decision.request_id == Outcome.request_id)
             .where(Decision.tenant == subject.removeprefix(TENANT_SUBJECT) if subject.startswith(TENANT_SUBJECT)
                    else Decision.key_id == subject, Decision.created_at >= since))
    if before is not None:
        query = query.where(Outcome.created_at < before)
    with engine.connect() as conn:
        return float(conn.execute(query).scalar_one())


def spend_by_subject(engine: Engine, since: datetime) -> tuple[dict[str, float], dict[str, float]]:
    """``({key id: USD}, {tenant: USD})`` of the outcomes of requests decided at or after
    ``since`` (UTC): :func:`recorded_spend` for every key and tenant in two grouped queries.

    Raises:
        sqlalchemy.exc.SQLAlchemyError: the database cannot be read.
    """
    cost = sa.func.coalesce(sa.func.sum(Outcome.cost_usd), 0.0)
    joined = sa.select().select_from(Outcome).join(Decision, Decision.request_id == Outcome.request_id)
    by_key = joined.add_columns(Decision.key_id, cost).where(Decision.created_at >= since,
                                                            Decision.key_id.is_not(None)).group_by(Decision.key_id)
    by_tenant = joined.add_columns(Decision.tenant, cost).where(Decision.created_at >= since,
                                                               Decision.tenant.is_not(None)).group_by(Decision.tenant)
    with engine.connect() as conn:
        keys = {k: float(v) for k, v in conn.execute(by_key)}
        tenants = {t: float(v) for t, v in conn.execute(by_tenant)}
    return keys, tenants
