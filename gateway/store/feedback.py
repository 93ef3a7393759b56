"""Feedback records, and finding the decision a feedback is about.

A client usually rates a request right after its response, while the decision row may
still sit in the writer's queue (or, with the database down, in the journal). So
:func:`find_decision` looks in two places:

1. :class:`RecentDecisions`, the request ids (and tenants) this process recorded lately:
   a hit needs no database round trip and works while the database is down;
2. the ``decisions`` table, polled for up to ``wait_s`` seconds, so that a decision
   recorded by another replica (still in that replica's queue) is found once it flushes.

Only when both miss is the request unknown.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import Engine, select

from gateway.store.models import Decision

RECENT_MAX = 200_000
"""Request ids kept by :class:`RecentDecisions` (about 100 bytes each)."""


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


def new_feedback_id() -> str:
    """A fresh feedback id: ``fb-`` and 32 hex digits."""
    return f"fb-{uuid.uuid4().hex}"


@dataclass
class FeedbackRecord:
    """One rating of one request (a row of ``feedback``).

    Attributes:
        id: primary key; a replayed or retried row with the same id is ignored.
        request_id: the rated request (``x-mixroute-request-id``).
        score: in [0, 1], 1 = good; ``None`` when only a label is given.
        label: free-form class such as ``good``, ``wrong_language``; ``None`` if absent.
        comment: free text, never logged.
        source: where the feedback came from (``api`` for ``POST /v1/feedback``).
        tenant: tenant of the rated request (``None`` when auth was off).
        created_at: UTC time the feedback was received.
    """

    request_id: str
    score: float | None = None
    label: str | None = None
    comment: str | None = None
    source: str = "api"
    tenant: str | None = None
    id: str = field(default_factory=new_feedback_id)
    created_at: datetime = field(default_factory=_utcnow)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class DecisionRef:
    """What feedback needs to know about a decision: that it exists, and whose it is."""

    request_id: str
    tenant: str | None


class RecentDecisions:
    """Bounded insertion-ordered map ``request_id -> tenant`` of decisions recorded here.

    Args:
        maxlen: entries kept; the oldest are forgotten first (they are in the database
            by then, or the database is down and has been for a long time).
    """

    def __init__(self, maxlen: int = RECENT_MAX) -> None:
        self.maxlen = maxlen
        self._map: OrderedDict[str, str | None] = OrderedDict()

    def add(self, request_id: str, tenant: str | None) -> None:
        self._map[request_id] = tenant
        if len(self._map) > self.maxlen:
            self._map.popitem(last=False)

    def get(self, request_id: str) -> DecisionRef | None:
        if request_id not in self._map:
            return None
        return DecisionRef(request_id, self._map[request_id])


def _select(engine: Engine, request_id: str) -> DecisionRef | None:
    with engine.connect() as conn:
        row = conn.execute(select(Decision.tenant).where(Decision.request_id == request_id)).first()
    return DecisionRef(request_id, row[0]) if row is not None else None


async def find_decision(recent: RecentDecisions, engine: Engine | None, request_id: str,
                        *, wait_s: float, poll_s: float = 0.05) -> DecisionRef | None:
    """The decision of ``request_id``, from memory or the database; ``None`` if unknown.

    Args:
        recent: decisions this process recorded.
        engine: the store's engine (``None``: memory only).
        request_id: the request to find.
        wait_s: how long to keep polling the database for a row still being written
            by another replica (seconds).
        poll_s: pause between polls (seconds).

    Raises:
        sqlalchemy.exc.OperationalError (and other ``SQLAlchemyError``): the database
            cannot be queried and the request is not in ``recent``.
    """
    deadline = time.monotonic() + wait_s
    while True:
        ref = recent.get(request_id)
        if ref is not None or engine is None:
            return ref
        ref = await asyncio.to_thread(_select, engine, request_id)
        if ref is not None or time.monotonic() >= deadline:
            return ref
        await asyncio.sleep(poll_s)
