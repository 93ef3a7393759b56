"""Outcome signals -> observations, on real SQLite and PostgreSQL stores."""

from __future__ import annotations

from datetime import timedelta

from gateway.store.db import make_engine, upgrade
from gateway.store.feedback import FeedbackRecord
from gateway.store.observations import ingest, load
from gateway.store.rows import as_row
from gateway.store.upsert import write_items
from tests.store.records import T0, decision, outcome


def _write(url: str, *records) -> None:
    engine = make_engine(url)
    upgrade(engine)
    table = {"DecisionRecord": "decisions", "OutcomeRecord": "outcomes", "FeedbackRecord": "feedback"}
    with engine.begin() as conn:
        write_items(conn, [(table[type(r).__name__], as_row(r)) for r in records])
    engine.dispose()


def _ask(rid: str, at: float, prompt: str = "p1", tenant: str = "acme", backend: str = "fake-small",
         answered_after: float | None = 1.0, status: str = "ok", key: str | None = "k1") -> list:
    recs = [decision(rid, at=at, tenant=tenant, chosen=backend, signals={"prompt_hash": prompt}, key_id=key)]
    if answered_after is not None:
        recs.append(outcome(rid, at=at + answered_after, backend=backend, status=status))
    return recs


def _observations(url: str) -> dict[str, tuple]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            from sqlalchemy import text

            return {r[0]: tuple(r[1:]) for r in conn.execute(text(
                "SELECT id, request_id, backend, score, source, predicted FROM observations"))}
    finally:
        engine.dispose()


def test_feedback_becomes_an_observation_of_the_backend_that_answered(db_url: str) -> None:
    _write(db_url, decision("r1", chosen="fake-small"), outcome("r1", backend="fake-large"),
           FeedbackRecord("r1", score=0.25, id="f1", created_at=T0 + timedelta(seconds=5)),
           FeedbackRecord("r1", label="only a label", id="f2", created_at=T0 + timedelta(seconds=6)),
           FeedbackRecord("r1", score=1.0, source="judge", id="f3", created_at=T0 + timedelta(seconds=7)),
           decision("refused", chosen=""), FeedbackRecord("refused", score=1.0, id="f4", created_at=T0),
           FeedbackRecord("unknown", score=1.0, id="f5", created_at=T0))
    engine = make_engine(db_url)
    assert ingest(engine, T0) == 2
    assert ingest(engine, T0) == 2  # a second pass (another replica) stores nothing twice
    engine.dispose()
    got = _observations(db_url)
    # The outcome's backend answered (a fallback), not the decision's choice; no candidate
    # predicted fake-large, so its estimate is unknown.
    assert got == {"feedback/r1": ("r1", "fake-large", 0.25, "feedback", None),
                   "judge/r1": ("r1", "fake-large", 1.0, "judge", None)}


def test_a_request_rated_again_counts_once_with_its_newest_score(db_url: str) -> None:
    _write(db_url, decision("r1"), outcome("r1"),
           *[FeedbackRecord("r1", score=0.0, id=f"spam{i}", created_at=T0 + timedelta(seconds=i)) for i in range(5)])
    engine = make_engine(db_url)
    ingest(engine, T0)
    _write(db_url, FeedbackRecord("r1", score=1.0, id="later", created_at=T0 + timedelta(minutes=5)))
    ingest(engine, T0)
    ingest(engine, T0 + timedelta(seconds=3))  # a pass that sees only older rows changes nothing
    engine.dispose()
    assert _observations(db_url) == {"feedback/r1": ("r1", "fake-small", 1.0, "feedback", 0.91)}


def test_feedback_keeps_the_estimate_the_router_had(db_url: str) -> None:
    _write(db_url, decision("r1"), outcome("r1"), FeedbackRecord("r1", score=0.5, id="f1", created_at=T0))
    engine = make_engine(db_url)
    ingest(engine, T0)
    [row] = load(engine, T0)
    engine.dispose()
    assert (row.backend, row.score, row.predicted, row.source, row.probability) == \
        ("fake-small", 0.5, 0.91, "feedback", 1.0)


def test_an_observation_keeps_the_probability_its_backend_was_chosen_with(db_url: str) -> None:
    _write(db_url, decision("r1", probability=0.05), outcome("r1"),
           decision("r2", probability=0.5), outcome("r2", backend="fake-large"),  # a fallback answered
           FeedbackRecord("r1", score=0.5, id="f1", created_at=T0), FeedbackRecord("r2", score=0.5, id="f2", created_at=T0))
    engine = make_engine(db_url)
    ingest(engine, T0)
    got = {(r.backend, r.probability) for r in load(engine, T0)}
    engine.dispose()
    assert got == {("fake-small", 0.05), ("fake-large", None)}


def test_a_prompt_retried_soon_after_its_answer_is_a_zero_for_that_answer(db_url: str) -> None:
    _write(db_url,
           *_ask("a1", 0), *_ask("a2", 5, backend="fake-large"),      # retried 4 s after the answer
           *_ask("b1", 100, prompt="p2"), *_ask("b2", 200, prompt="p2"),  # 99 s later: not a retry
           *_ask("c1", 300, prompt="p3"), *_ask("c2", 300.5, prompt="p3"),  # sent before c1 was answered
           *_ask("d1", 400, prompt="p4", tenant="acme"), *_ask("d2", 402, prompt="p4", tenant="globex"),
           *_ask("e1", 500, prompt="p5", status="error"), *_ask("e2", 502, prompt="p5"),
           *_ask("f1", 600, prompt="p6", key="k1"), *_ask("f2", 602, prompt="p6", key="k2"),  # another key
           *_ask("g1", 700, prompt="p7", key=None), *_ask("g2", 702, prompt="p7", key=None))  # auth off: one client
    engine = make_engine(db_url)
    ingest(engine, T0, retry_window_s=30)
    engine.dispose()
    assert _observations(db_url) == {"retry/a1": ("a1", "fake-small", 0.0, "retry", 0.91),
                                     "retry/g1": ("g1", "fake-small", 0.0, "retry", 0.91)}


def test_load_reads_from_a_time_on(db_url: str) -> None:
    _write(db_url, decision("r1"), outcome("r1"), decision("r2"), outcome("r2"),
           FeedbackRecord("r1", score=0.0, id="f1", created_at=T0),
           FeedbackRecord("r2", score=1.0, id="f2", created_at=T0 + timedelta(hours=1)))
    engine = make_engine(db_url)
    ingest(engine, T0)
    assert [r.score for r in load(engine, T0)] == [0.0, 1.0]
    assert [r.score for r in load(engine, T0 + timedelta(minutes=1))] == [1.0]
    engine.dispose()


def test_prune_takes_a_requests_observations_with_it(db_url: str) -> None:
    from gateway.store.retention import count_older, prune

    _write(db_url, decision("old"), outcome("old"), FeedbackRecord("old", score=1.0, id="f1", created_at=T0),
           decision("new", at=7200), outcome("new", at=7201),
           FeedbackRecord("new", score=0.0, id="f2", created_at=T0 + timedelta(hours=2)))
    engine = make_engine(db_url)
    ingest(engine, T0)
    cutoff = T0 + timedelta(hours=1)
    assert count_older(engine, cutoff).observations == 1
    assert prune(engine, cutoff).observations == 1
    assert [r.score for r in load(engine, T0)] == [0.0]
    engine.dispose()
