"""Outcome signals -> observations: the rows the outcome memory learns from.

An observation is one score in [0, 1] of the backend that answered one request, with its
source and time (:class:`gateway.store.models.Observation`). Two signals are derived here
from what the store already holds, off the request path:

- **feedback**: every feedback row with a score becomes an observation of the backend that
  answered the rated request (the outcome's ``backend``; the decision's ``chosen`` while
  no outcome is stored). A feedback row whose ``source`` is ``judge`` keeps that source.
- **retry**: the same prompt (``signals.prompt_hash`` of the decision: a hash of the
  prompt text the classifier reads) sent again by the same tenant with the same API key
  (``key_id``) within ``window_s`` seconds after the earlier request was answered (outcome
  ``ok``) is a score of 0 for the earlier answer's backend. Requests still running when the next one arrives are parallel
  sends, not a retry, and give no observation.

Derivation is idempotent (an observation's id is ``<source>/<request id>``: a request counts
once per source, feedback with its newest score), so every replica may run it on the shared
store and the result is the same rows; a client rating one answer many times does not
weigh more than once.
Signals whose decision is not stored yet are picked up by a later pass that still covers
them (:func:`ingest`'s ``since``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from sqlalchemy import Connection, Engine, or_, select

from gateway.store.models import Decision, Feedback, Observation, Outcome
from gateway.store.upsert import _insert
from router.records import COUNT_TOKENS

#: Seconds after an answer within which the same prompt from the same tenant counts as a
#: retry of it, when the policy does not say (``learning.retry_window_s``).
RETRY_WINDOW_S = 30.0


@dataclass(frozen=True)
class ObservationRow:
    """An observation as the outcome memory reads it (score in [0, 1], time UTC)."""

    backend: str
    score: float
    predicted: float | None
    probability: float | None
    source: str
    created_at: datetime


def predicted(signals: dict | None, candidates: list | None, backend: str) -> float | None:
    """The quality the router estimated for ``backend`` before its own traffic counted:
    ``signals.learning.before`` (recorded when the policy learns), else the candidate's
    ``predicted_quality`` (then it is that estimate); ``None`` when neither has it."""
    before = ((signals or {}).get("learning") or {}).get("before") or {}
    value = before.get(backend)
    if value is None:
        value = next((c.get("predicted_quality") for c in candidates or () if isinstance(c, dict)
                      and c.get("backend") == backend), None)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _feedback_rows(conn: Connection, since: datetime) -> list[dict]:
    q = (select(Feedback.id, Feedback.request_id, Feedback.created_at, Feedback.score, Feedback.source,
                Decision.route, Decision.tenant, Decision.chosen, Outcome.backend, Decision.signals,
                Decision.candidates, Decision.probability)
         .join(Decision, Decision.request_id == Feedback.request_id)
         .outerjoin(Outcome, Outcome.request_id == Feedback.request_id)
         .where(Feedback.score.is_not(None), Feedback.created_at >= since,
                # a token count was never answered by a model: nothing to rate
                or_(Decision.endpoint.is_(None), Decision.endpoint != COUNT_TOKENS)))
    out = []
    for fid, rid, at, score, source, route, tenant, chosen, answered, signals, cands, prob in conn.execute(q):
        backend = answered or chosen
        if not backend:  # a refused request: no answer was rated
            continue
        kind = "judge" if source == "judge" else "feedback"
        out.append({"id": f"{kind}/{rid}", "request_id": rid, "created_at": at, "backend": backend,
                    "route": route, "tenant": tenant, "score": min(max(float(score), 0.0), 1.0),
                    "predicted": predicted(signals, cands, backend),
                    "probability": prob if backend == chosen else None, "source": kind})
    return out


def _retry_rows(conn: Connection, since: datetime, window_s: float) -> list[dict]:
    prompt = Decision.signals["prompt_hash"].as_string()
    q = (select(Decision.request_id, Decision.tenant, Decision.key_id, Decision.route, Decision.created_at, prompt,
                Outcome.backend, Outcome.status, Outcome.created_at, Decision.chosen, Decision.probability)
         .outerjoin(Outcome, Outcome.request_id == Decision.request_id)
         .where(Decision.created_at >= since - timedelta(seconds=window_s), prompt.is_not(None))
         .order_by(Decision.created_at))
    last: dict[tuple, tuple] = {}
    out = []
    window = timedelta(seconds=window_s)
    for rid, tenant, key_id, route, at, phash, backend, status, answered_at, chosen, prob in conn.execute(q):
        # One client resending: the same tenant and the same API key. Two keys of a tenant
        # (two applications, two users) asking the same question are not a retry.
        key = (tenant, key_id, phash)
        prev = last.get(key)
        last[key] = (rid, route, backend, status, answered_at, prob if backend == chosen else None)
        if prev is None or at < since:
            continue
        p_rid, p_route, p_backend, p_status, p_answered, p_prob = prev
        if p_status == "ok" and p_backend and p_answered is not None and timedelta(0) <= at - p_answered <= window:
            out.append({"id": f"retry/{p_rid}", "request_id": p_rid, "created_at": at, "backend": p_backend,
                        "route": p_route, "tenant": tenant, "score": 0.0, "predicted": None,
                        "probability": p_prob, "source": "retry"})
    if out:  # the estimates of the retried answers, read for these few requests only
        found = conn.execute(select(Decision.request_id, Decision.signals, Decision.candidates)
                             .where(Decision.request_id.in_([r["request_id"] for r in out])))
        by_id = {rid: (signals, cands) for rid, signals, cands in found}
        for r in out:
            r["predicted"] = predicted(*by_id.get(r["request_id"], (None, None)), r["backend"])
    return out


def insert(conn: Connection, rows: Iterable[dict]) -> int:
    """Upsert observation rows on ``id``: of two rows with one id, the later ``created_at``
    wins (a request rated again counts once, with its newest score), whatever order the
    rows arrive in."""
    newest: dict[str, dict] = {}
    for r in rows:
        if r["id"] not in newest or r["created_at"] >= newest[r["id"]]["created_at"]:
            newest[r["id"]] = r
    if newest:
        stmt = _insert(conn.dialect.name)(Observation)
        stmt = stmt.on_conflict_do_update(
            index_elements=["id"], set_={c.name: stmt.excluded[c.name] for c in Observation.__table__.columns
                                         if c.name != "id"},
            where=stmt.excluded.created_at >= Observation.__table__.c.created_at)
        conn.execute(stmt, list(newest.values()))
    return len(newest)


def ingest(engine: Engine, since: datetime, retry_window_s: float = RETRY_WINDOW_S,
           retries_since: datetime | None = None) -> int:
    """Derive the observations of feedback given at or after ``since``, and of retries made
    at or after ``retries_since`` (default ``since``; UTC), and store the new ones (blocking;
    run in a thread from async code). Retries are looked for in the decisions of that
    window, so a periodic caller keeps it short: decisions far outnumber feedback.

    Returns:
        Observations derived (rows offered; those already stored are left unchanged).

    Raises:
        sqlalchemy.exc.SQLAlchemyError: the database cannot be read or written.
    """
    with engine.begin() as conn:
        rows = _feedback_rows(conn, since) + _retry_rows(conn, retries_since or since, retry_window_s)
        return insert(conn, rows)


def load(engine: Engine, since: datetime) -> list[ObservationRow]:
    """The observations made at or after ``since`` (UTC), oldest first (blocking).

    Raises:
        sqlalchemy.exc.SQLAlchemyError: the database cannot be read.
    """
    q = (select(Observation.backend, Observation.score, Observation.predicted, Observation.probability,
                Observation.source, Observation.created_at)
         .where(Observation.created_at >= since).order_by(Observation.created_at))
    with engine.connect() as conn:
        return [ObservationRow(*r) for r in conn.execute(q)]


def read_all(engine: Engine, retry_window_s: float = RETRY_WINDOW_S) -> list[dict]:
    """Every observation the store holds or its feedback and retries give (those no
    gateway derived yet included), one per id (the newest), without writing anything: for
    ``mixroute train --from-logs`` on a store opened read-only (blocking). Each row also
    has ``domain``: its decision's ``signals.domain`` (``None`` without one).

    Raises:
        sqlalchemy.exc.SQLAlchemyError: the database cannot be read.
    """
    epoch = datetime(1970, 1, 1, tzinfo=timezone.utc)
    cols = [c.name for c in Observation.__table__.columns]
    with engine.connect() as conn:
        stored = [dict(zip(cols, r)) for r in conn.execute(select(*Observation.__table__.columns))]
        derived = _feedback_rows(conn, epoch) + _retry_rows(conn, epoch, retry_window_s)
        newest: dict[str, dict] = {}
        for r in stored + derived:
            if r["id"] not in newest or r["created_at"] >= newest[r["id"]]["created_at"]:
                newest[r["id"]] = r
        ids = sorted({r["request_id"] for r in newest.values()})
        domain = Decision.signals["domain"].as_string()
        domains: dict[str, str | None] = {}
        for i in range(0, len(ids), 500):  # bounded IN lists
            q = select(Decision.request_id, domain).where(Decision.request_id.in_(ids[i:i + 500]))
            domains.update(dict(conn.execute(q).all()))
    return [{**r, "domain": domains.get(r["request_id"])} for r in newest.values()]
