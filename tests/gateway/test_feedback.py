"""``POST /v1/feedback`` through the real gateway over HTTP."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
import sqlalchemy as sa

from gateway.auth.keys import create_key
from gateway.settings import Settings
from gateway.store import Store
from gateway.store.db import make_engine, upgrade
from tests.gateway.conftest import start_gateway, wait_row
from tests.store.records import decision

MSG = [{"role": "user", "content": "rate me"}]
POLICY = """version: 1
backends:
  - {name: good, kind: fake, model: good-model, quality: 0.9, pricing: {input_per_1m: 1, output_per_1m: 2}}
routes:
  - {name: auto, backends: [good]}
"""


def _feedback_rows(db: str, request_id: str) -> list[dict]:
    engine = sa.create_engine(db)
    try:
        with engine.connect() as conn:
            return [dict(r) for r in conn.execute(
                sa.text("SELECT * FROM feedback WHERE request_id = :r ORDER BY created_at"), {"r": request_id},
            ).mappings()]
    finally:
        engine.dispose()


def _wait_feedback(db: str, request_id: str, n: int, timeout: float = 5.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    while True:
        found = _feedback_rows(db, request_id)
        if len(found) >= n or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    # A long flush interval: decision rows stay queued, so feedback always races them.
    gateway = start_gateway(tmp_path_factory.mktemp("feedback"), POLICY, store_flush_interval_s=1.5)
    yield gateway
    gateway.stop()


def _ask(gw, key: str | None = None) -> str:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    resp = httpx.post(gw.v1 + "/chat/completions", json={"messages": MSG}, headers=headers, timeout=30)
    assert resp.status_code == 200, resp.text
    return resp.headers["x-mixroute-request-id"]


def _rate(gw, key: str | None = None, **body) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    return httpx.post(gw.v1 + "/feedback", json=body, headers=headers, timeout=30)


def test_immediate_feedback_finds_a_decision_not_yet_written(gw) -> None:
    rid = _ask(gw)
    resp = _rate(gw, request_id=rid, score=0.75, label="good", comment="fine")
    assert resp.status_code == 202, resp.text
    body = resp.json()
    assert body["object"] == "feedback" and body["request_id"] == rid and body["id"].startswith("fb-")
    assert resp.elapsed.total_seconds() < 0.5  # found in memory, no polling
    [row] = _wait_feedback(gw.settings.database_url, rid, 1)
    assert (row["score"], row["label"], row["comment"], row["source"], row["id"]) == (
        0.75, "good", "fine", "api", body["id"])


def test_many_feedbacks_per_request_and_idempotent_ids(gw) -> None:
    rid = _ask(gw)
    assert _rate(gw, request_id=rid, label="wrong_language").status_code == 202
    assert _rate(gw, request_id=rid, score=0, source="editor").status_code == 202
    first = _rate(gw, request_id=rid, score=1, id="thumb-1")
    again = _rate(gw, request_id=rid, score=1, id="thumb-1")  # a client retry
    assert first.json()["id"] == again.json()["id"] == f"{rid}/thumb-1"
    time.sleep(2)  # one flush interval: all rows written, the retry ignored
    rows = _feedback_rows(gw.settings.database_url, rid)
    assert sorted((r["score"], r["label"], r["source"]) for r in rows if r["label"]) == [
        (None, "wrong_language", "api")]
    assert sorted(r["score"] for r in rows if r["score"] is not None) == [0.0, 1.0]
    assert len(rows) == 3


def test_decision_of_another_replica_is_found_in_the_database(gw) -> None:
    async def other_replica() -> None:
        async with Store(Settings(database_url=gw.settings.database_url, store_flush_interval_s=0.02),
                         gw.settings.database_url.removeprefix("sqlite:///") + ".other-journal") as store:
            store.record_decision(decision("from-replica-b", tenant=None))

    asyncio.run(other_replica())
    resp = _rate(gw, request_id="from-replica-b", score=0.5)
    assert resp.status_code == 202, resp.text
    [row] = _wait_feedback(gw.settings.database_url, "from-replica-b", 1)
    assert row["score"] == 0.5


@pytest.mark.parametrize(("body", "status", "code", "param"), [
    ({"request_id": "x", "score": 1.5}, 400, "invalid_value", "score"),
    ({"request_id": "x", "score": -0.01}, 400, "invalid_value", "score"),
    ({"request_id": "x", "score": "good"}, 400, "invalid_value", "score"),
    ({"request_id": "x", "score": True}, 400, "invalid_value", "score"),
    ({"request_id": "x"}, 400, "missing_required_parameter", "score"),
    ({"request_id": "x", "score": None, "label": None}, 400, "missing_required_parameter", "score"),
    ({"score": 0.5}, 400, "missing_required_parameter", "request_id"),
    ({"request_id": "x", "score": 0.5, "stars": 5}, 400, "invalid_value", "stars"),
    # only the gateway's own judge writes judge grades (they weigh as the judge's)
    ({"request_id": "x", "score": 1, "source": "judge"}, 400, "invalid_value", "source"),
    ({"request_id": "x", "score": 1, "source": " Judge"}, 400, "invalid_value", "source"),
])
def test_bad_feedback_gets_the_openai_envelope(gw, body, status, code, param) -> None:
    resp = _rate(gw, **body)
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert (err["code"], err["param"]) == (code, param)
    assert err["type"] == "invalid_request_error" and err["message"]


@pytest.mark.parametrize("field", ["comment", "label", "source", "id"])
def test_a_nul_character_is_refused_before_the_202(gw, field) -> None:
    # PostgreSQL text cannot hold U+0000: accepted, the row was refused by the store after
    # the 202 (on SQLite it was stored, so the same request must be refused on both).
    rid = _ask(gw)
    resp = _rate(gw, request_id=rid, score=1, **{field: "a\x00b"})
    assert resp.status_code == 400, resp.text
    err = resp.json()["error"]
    assert (err["code"], err["param"]) == ("invalid_value", field) and "NUL" in err["message"]
    time.sleep(2)  # one flush interval: nothing was queued
    assert _feedback_rows(gw.settings.database_url, rid) == []


def test_a_nul_request_id_is_a_400_not_a_store_outage(gw) -> None:
    resp = _rate(gw, request_id="mr-\x00", score=1)
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["param"] == "request_id"


def test_on_postgresql_a_nul_comment_is_a_400_and_no_row_is_rejected(tmp_path) -> None:
    # The reason for the check above, on a real PostgreSQL: the gateway's answer for a
    # comment with a NUL is a 400 there too, and the valid feedback next to it is stored.
    from tests.store.conftest import fresh_pg_schema

    with fresh_pg_schema() as db:
        gw = start_gateway(tmp_path, POLICY, database_url=db, store_journal_path=tmp_path / "journal.jsonl")
        try:
            rid = _ask(gw)
            assert _rate(gw, request_id=rid, score=1, comment="a\x00b").status_code == 400
            assert _rate(gw, request_id=rid, score=0.5, comment="fine").status_code == 202
            rows = _wait_feedback(db, rid, 1)
        finally:
            gw.stop()
        assert [(r["score"], r["comment"]) for r in rows] == [(0.5, "fine")]
        assert not list(tmp_path.glob("*.rejected"))


def test_unknown_request_is_accepted_and_dropped(gw) -> None:
    resp = _rate(gw, request_id="never-seen", label="bad")
    assert resp.status_code == 202 and resp.elapsed.total_seconds() < 0.5
    assert resp.json()["request_id"] == "never-seen"
    time.sleep(2.5)  # past the wait for other replicas' decisions, and a flush interval
    assert _feedback_rows(gw.settings.database_url, "never-seen") == []


def test_a_tenant_rates_only_its_own_requests(tmp_path) -> None:
    db = f"sqlite:///{tmp_path}/keys.db"
    engine = make_engine(db)
    upgrade(engine)
    acme, _ = create_key(engine, tenant="acme")
    globex, _ = create_key(engine, tenant="globex")
    engine.dispose()
    gw = start_gateway(tmp_path, POLICY, database_url=db, admin_key="admin-secret")
    try:
        rid = _ask(gw, acme)
        other = _rate(gw, globex, request_id=rid, score=0.1)
        unknown = _rate(gw, globex, request_id="mr-never-seen", score=0.1)
        # Another tenant's request and an unknown one get the same answer: nothing tells them apart.
        assert other.status_code == unknown.status_code == 202
        assert set(other.json()) == set(unknown.json()) == {"id", "object", "request_id"}
        assert _rate(gw, None, request_id=rid, score=0.1).status_code == 401
        assert _rate(gw, acme, request_id=rid, score=0.9).status_code == 202
        assert _rate(gw, "admin-secret", request_id=rid, label="audited").status_code == 202
        rows = _wait_feedback(db, rid, 2)
        wait_row(db, "decisions", rid)
        assert _rate(gw, globex, request_id=rid, score=0.2).status_code == 202  # from the database too
        time.sleep(2.5)
        rows = _feedback_rows(db, rid)
        assert sorted((r["tenant"], str(r["score"]), str(r["label"])) for r in rows) == [
            ("acme", "0.9", "None"), ("acme", "None", "audited")]  # globex's two were dropped
    finally:
        gw.stop()
