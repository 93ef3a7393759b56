"""SQLAlchemy 2 models of the decision/outcome store.

Five tables, all keyed so that a replayed row never doubles:

- ``decisions`` -- one row per request, written before dispatch (:class:`router.records.DecisionRecord`).
- ``outcomes`` -- one row per request, written after the last byte (:class:`router.records.OutcomeRecord`).
- ``feedback`` -- any number of rows per request, keyed by their own ``id``
  (:class:`gateway.store.feedback.FeedbackRecord`).
- ``policies`` -- the text of every policy that decided, keyed by its hash.
- ``observations`` -- outcome signals (feedback, retries, a judge) turned into scores of
  the backend that answered, for the outcome memory (:mod:`gateway.store.observations`).

Column names equal the record dataclasses' field names, so a record's ``as_dict()`` is a
row. ``JSON`` columns work on SQLite (TEXT) and PostgreSQL (JSON). The schema itself is
created by the Alembic migrations in :mod:`migrations`, never by ``create_all`` at runtime.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import JSON, DateTime, Dialect, Double, Index, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC timestamp on every backend.

    PostgreSQL stores ``timestamptz``; SQLite has no time zones, so values are stored as
    naive UTC text (fixed width, so they compare correctly as strings) and come back
    tagged UTC. Naive input is taken to be UTC already.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        value = value.astimezone(timezone.utc)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc)


class Base(DeclarativeBase):
    """Declarative base; ``Base.metadata`` is the migrations' target metadata."""


class Decision(Base):
    """A routing decision (see :class:`router.records.DecisionRecord` for field meanings)."""

    __tablename__ = "decisions"

    request_id: Mapped[str] = mapped_column(String, primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    tenant: Mapped[str | None] = mapped_column(String)
    key_id: Mapped[str | None] = mapped_column(String)
    route: Mapped[str] = mapped_column(String)
    endpoint: Mapped[str] = mapped_column(String)
    policy_hash: Mapped[str] = mapped_column(String)
    pinned: Mapped[bool]
    chosen: Mapped[str] = mapped_column(String)
    reason: Mapped[str] = mapped_column(String)
    probability: Mapped[float]
    prefix_hash: Mapped[str | None] = mapped_column(String)
    candidates: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    fallbacks: Mapped[list[str]] = mapped_column(JSON)
    signals: Mapped[dict[str, Any]] = mapped_column(JSON)
    adapter_version: Mapped[str | None] = mapped_column(String)

    __table_args__ = (Index("ix_decisions_created_at", "created_at"),)


class Outcome(Base):
    """What happened to a request (see :class:`router.records.OutcomeRecord`).

    Units: ``ttft_s``, ``itl_s``, ``latency_s`` in seconds; ``tokens_*`` in tokens;
    ``cost_usd`` in USD.
    """

    __tablename__ = "outcomes"

    request_id: Mapped[str] = mapped_column(String, primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    backend: Mapped[str | None] = mapped_column(String)
    model: Mapped[str | None] = mapped_column(String)
    status: Mapped[str] = mapped_column(String)
    http_status: Mapped[int]
    error_code: Mapped[str | None] = mapped_column(String)
    fallbacks_taken: Mapped[list[str]] = mapped_column(JSON)
    ttft_s: Mapped[float | None]
    itl_s: Mapped[float | None]
    latency_s: Mapped[float | None]
    tokens_in: Mapped[int]
    tokens_out: Mapped[int]
    tokens_cached: Mapped[int]
    tokens_cache_write: Mapped[int | None]
    tokens_cache_write_1h: Mapped[int | None]
    cost_usd: Mapped[float]
    streamed: Mapped[bool]
    usage_estimated: Mapped[bool | None]

    __table_args__ = (Index("ix_outcomes_created_at", "created_at"),)


class Policy(Base):
    """A policy text by hash; ``first_seen`` is when this store first recorded it (UTC)."""

    __tablename__ = "policies"

    hash: Mapped[str] = mapped_column(String, primary_key=True)
    text: Mapped[str] = mapped_column(Text)
    first_seen: Mapped[datetime] = mapped_column(UTCDateTime)


class Feedback(Base):
    """A score and/or label for one request, possibly days after it (many per request).

    ``request_id`` joins ``decisions`` but is not a foreign key: feedback rows travel
    through the same queue and journal as decisions and may be pruned separately.
    ``score`` is in [0, 1] (1 = good); ``source`` says where the feedback came from
    (``api`` for ``POST /v1/feedback``); ``tenant`` is the tenant of the rated request.
    """

    __tablename__ = "feedback"

    id: Mapped[str] = mapped_column(String, primary_key=True)
    request_id: Mapped[str] = mapped_column(String)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    score: Mapped[float | None] = mapped_column(Double)
    label: Mapped[str | None] = mapped_column(String)
    comment: Mapped[str | None] = mapped_column(Text)
    source: Mapped[str] = mapped_column(String)
    tenant: Mapped[str | None] = mapped_column(String)

    __table_args__ = (Index("ix_feedback_request_id", "request_id"),
                      Index("ix_feedback_created_at", "created_at"))


class Observation(Base):
    """One outcome signal about one answer: ``score`` in [0, 1] (1 = good) of ``backend``
    for request ``request_id`` (join ``decisions`` for the prompt's features: signals,
    prefix hash, the candidates' predictions), from ``source`` (``feedback``, ``retry``
    or ``judge``) at ``created_at`` (when the signal arrived, UTC). ``predicted`` is the
    quality the router estimated for ``backend`` on that request before its own traffic
    was counted (``None``: not known), so that the memory learns the estimate's error
    (:mod:`router.learning.memory`); ``probability`` is the chance the decision gave
    ``backend`` (its ``probability`` when ``backend`` was its choice, ``None`` when a
    fallback answered). ``id`` is
    ``<source>/<request_id>``: one row per answer and source (feedback: the newest score),
    however often and on whichever replica it is derived."""

    __tablename__ = "observations"

    id: Mapped[str] = mapped_column(String, primary_key=True)
    request_id: Mapped[str] = mapped_column(String)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    backend: Mapped[str] = mapped_column(String)
    route: Mapped[str | None] = mapped_column(String)
    tenant: Mapped[str | None] = mapped_column(String)
    score: Mapped[float] = mapped_column(Double)
    predicted: Mapped[float | None] = mapped_column(Double)
    probability: Mapped[float | None] = mapped_column(Double)
    source: Mapped[str] = mapped_column(String)

    __table_args__ = (Index("ix_observations_created_at", "created_at"),)


TABLES = {t.name: t for t in Base.metadata.sorted_tables}
"""Table name -> :class:`sqlalchemy.Table`, for the writer and the journal."""
