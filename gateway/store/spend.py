"""What the store recorded a tenant spending: the seed of its budget counter
(:meth:`gateway.limits.base.Limiter.seed_tenant`)."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy import Engine

from gateway.store.models import Decision, Outcome


def tenant_spend(engine: Engine | None, tenant: str, since: datetime) -> float:
    """USD of the outcomes of ``tenant``'s requests decided at or after ``since`` (UTC),
    as written so far (rows still queued in the writer are not counted).

    Raises:
        RuntimeError: the store has no engine (it never started).
        sqlalchemy.exc.SQLAlchemyError: the database cannot be read.
    """
    if engine is None:
        raise RuntimeError("the store has not started")
    query = (sa.select(sa.func.coalesce(sa.func.sum(Outcome.cost_usd), 0.0))
             .select_from(Outcome).join(Decision, Decision.request_id == Outcome.request_id)
             .where(Decision.tenant == tenant, Decision.created_at >= since))
    with engine.connect() as conn:
        return float(conn.execute(query).scalar_one())
