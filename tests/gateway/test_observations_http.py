"""Feedback and retries sent to the real gateway over HTTP become observations in its store."""

from __future__ import annotations

import time

import httpx
import pytest
import sqlalchemy as sa

from tests.gateway.conftest import start_gateway

POLICY = """version: 1
backends:
  - {name: good, kind: fake, model: good-model, quality: 0.9, pricing: {input_per_1m: 1, output_per_1m: 2}}
routes:
  - {name: auto, backends: [good]}
"""


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    gateway = start_gateway(tmp_path_factory.mktemp("observations"), POLICY, learning_refresh_s=0.1,
                            store_flush_interval_s=0.02)
    yield gateway
    gateway.stop()


def _ask(gw, text: str) -> str:
    resp = httpx.post(gw.v1 + "/chat/completions", json={"messages": [{"role": "user", "content": text}]},
                      timeout=30)
    assert resp.status_code == 200, resp.text
    return resp.headers["x-mixroute-request-id"]


def _observation(gw, oid: str, timeout: float = 10.0) -> dict | None:
    engine = sa.create_engine(gw.settings.database_url)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            with engine.connect() as conn:
                row = conn.execute(sa.text("SELECT * FROM observations WHERE id = :i"), {"i": oid}).mappings().first()
            if row:
                return dict(row)
            time.sleep(0.05)
    finally:
        engine.dispose()
    return None


def test_feedback_becomes_an_observation(gw) -> None:
    rid = _ask(gw, "rate this answer")
    resp = httpx.post(gw.v1 + "/feedback", json={"request_id": rid, "score": 0.75, "id": "c1"}, timeout=10)
    assert resp.status_code == 202, resp.text
    row = _observation(gw, f"feedback/{rid}")
    assert row is not None
    assert (row["request_id"], row["backend"], row["score"], row["source"], row["predicted"]) == \
        (rid, "good", 0.75, "feedback", 0.9)


def test_the_same_prompt_sent_again_soon_is_a_retry_of_the_first_answer(gw) -> None:
    first = _ask(gw, "what is the capital of Australia?")
    time.sleep(0.1)  # the first answer's outcome is recorded before the retry's decision
    second = _ask(gw, "what is the capital of Australia?")
    row = _observation(gw, f"retry/{first}")
    assert row is not None and (row["backend"], row["score"], row["source"]) == ("good", 0.0, "retry")
    assert _observation(gw, f"retry/{second}", timeout=0.5) is None  # nothing retried the second


def test_feedback_out_of_range_is_refused_and_observes_nothing(gw) -> None:
    rid = _ask(gw, "rate me out of range")
    for score in (1.5, -0.1):
        resp = httpx.post(gw.v1 + "/feedback", json={"request_id": rid, "score": score, "id": "bad"}, timeout=10)
        assert resp.status_code == 400 and resp.json()["error"]["param"] == "score", resp.text
    assert _observation(gw, f"feedback/{rid}", timeout=0.5) is None


def test_a_retry_is_the_same_tenant_with_the_same_key(tmp_path) -> None:
    from gateway.auth.keys import create_key
    from gateway.store.db import make_engine, upgrade

    db = f"sqlite:///{tmp_path}/keys.db"
    engine = make_engine(db)
    upgrade(engine)
    app_a, _ = create_key(engine, tenant="acme")
    app_b, _ = create_key(engine, tenant="acme")  # a second application of the same tenant
    engine.dispose()
    gw = start_gateway(tmp_path, POLICY, database_url=db, admin_key="admin-secret", learning_refresh_s=0.1,
                       store_flush_interval_s=0.02)
    try:
        def ask(key: str) -> str:
            resp = httpx.post(gw.v1 + "/chat/completions", headers={"authorization": f"Bearer {key}"},
                              json={"messages": [{"role": "user", "content": "summarise the news"}]}, timeout=30)
            assert resp.status_code == 200, resp.text
            time.sleep(0.1)  # answered and recorded before the next one is sent
            return resp.headers["x-mixroute-request-id"]

        first, other_app, again = ask(app_a), ask(app_b), ask(app_a)
        assert _observation(gw, f"retry/{first}") is not None  # the same key sent it again
        assert _observation(gw, f"retry/{other_app}", timeout=0.5) is None
        assert _observation(gw, f"retry/{again}", timeout=0.5) is None
    finally:
        gw.stop()
