"""What the store recorded a key or a tenant spending: the seed of its budget counter
(:meth:`gateway.limits.base.Limiter.seed_budget`)."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy import Engine

from gateway.limits.base import TENANT_SUBJECT
from gateway.store.models import Decision, Outcome


def recorded_spend(engine: Engine | None, subject: str, since: datetime) -> float:
    """USD of the outcomes of the requests of ``subject`` (a limits subject: ``tenant:<name>``
    for a tenant, else a key id) decided at or after ``since`` (UTC), as written so far (rows
    still queued in the writer are not counted; decisions from before migration 0006 have no
    key id).

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
    with engine.connect() as conn:
        return float(conn.execute(query).scalar_one())
