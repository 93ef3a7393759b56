"""Retention: delete requests older than a cutoff, in small transactions.

A request goes as a whole: its decision, its outcome, all its feedback and observations, by the
decision's ``created_at`` (feedback given yesterday on a request from last year goes
with the request). Outcomes and feedback older than the cutoff whose decision is already
gone (or never arrived) go too. Policies stay: they are small and every exported row
refers to one by hash.

Deletes run ``chunk`` requests per transaction, so a large prune never holds long locks
on a live PostgreSQL store; on very large stores, dropping time partitions is cheaper
still (see docs/STORE.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine, delete, func, select

from gateway.store.models import Decision, Feedback, Observation, Outcome


@dataclass
class PruneCounts:
    """Rows deleted (or, for a dry run, that would be) per table."""

    decisions: int = 0
    outcomes: int = 0
    feedback: int = 0
    observations: int = 0


def count_older(engine: Engine, cutoff: datetime) -> PruneCounts:
    """What :func:`prune` would delete (approximately, for orphans: exactly otherwise)."""
    old = select(Decision.request_id).where(Decision.created_at < cutoff)
    with engine.connect() as conn:
        def n(model, *where) -> int:
            return conn.execute(select(func.count()).select_from(model).where(*where)).scalar_one()

        return PruneCounts(
            decisions=n(Decision, Decision.created_at < cutoff),
            outcomes=n(Outcome, (Outcome.request_id.in_(old)) | (Outcome.created_at < cutoff)),
            feedback=n(Feedback, (Feedback.request_id.in_(old)) | (Feedback.created_at < cutoff)),
            observations=n(Observation, (Observation.request_id.in_(old)) | (Observation.created_at < cutoff)),
        )


def prune(engine: Engine, cutoff: datetime, *, chunk: int = 5000) -> PruneCounts:
    """Delete every request decided before ``cutoff`` (UTC), ``chunk`` per transaction.

    Raises:
        sqlalchemy.exc.SQLAlchemyError: the database refused or is down; what was
            deleted before stays deleted (each chunk is its own transaction).
    """
    counts = PruneCounts()
    while True:
        with engine.begin() as conn:
            ids = conn.execute(select(Decision.request_id).where(Decision.created_at < cutoff)
                               .limit(chunk)).scalars().all()
            if not ids:
                break
            counts.feedback += conn.execute(delete(Feedback).where(Feedback.request_id.in_(ids))).rowcount
            counts.observations += conn.execute(delete(Observation).where(Observation.request_id.in_(ids))).rowcount
            counts.outcomes += conn.execute(delete(Outcome).where(Outcome.request_id.in_(ids))).rowcount
            counts.decisions += conn.execute(delete(Decision).where(Decision.request_id.in_(ids))).rowcount
    with engine.begin() as conn:  # orphans: outcome or feedback rows whose decision is gone
        counts.outcomes += conn.execute(delete(Outcome).where(Outcome.created_at < cutoff)).rowcount
        counts.feedback += conn.execute(delete(Feedback).where(Feedback.created_at < cutoff)).rowcount
        counts.observations += conn.execute(delete(Observation).where(Observation.created_at < cutoff)).rowcount
    return counts
