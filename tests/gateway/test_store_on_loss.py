"""When neither the database nor the journal can take records, new requests are refused
(503 ``store_unavailable``) instead of answered and their records lost; every answered
request's decision and outcome reach the database once it is back. ``store_on_loss: serve``
chooses availability instead, and says so."""

from __future__ import annotations

import logging
import time

import httpx
import pytest
import sqlalchemy as sa

from tests.gateway.conftest import start_gateway
from tests.store.pg_server import PrivatePostgres, unavailable

POLICY = """version: 1
backends:
  - {name: plain, kind: fake, model: plain-model, quality: 0.9, pricing: {input_per_1m: 1, output_per_1m: 2}}
routes:
  - {name: auto, backends: [plain]}
"""
MAX_BYTES = 96 * 1024  # about 60 decision + outcome pairs; the refusal keeps a quarter in reserve


@pytest.fixture
def pg():
    reason = unavailable()
    if reason:
        pytest.skip(f"cannot start a private PostgreSQL server: {reason}")
    server = PrivatePostgres()
    server.start()
    yield server
    server.destroy()


def _post(gw, path: str, body: dict) -> httpx.Response:
    return httpx.post(gw.v1 + path, json={"model": "auto", **body}, timeout=30)


def _ask_until_refused(gw, limit: int = 400) -> tuple[list[str], httpx.Response | None]:
    answered, refused = [], None
    for i in range(limit):
        resp = _post(gw, "/chat/completions", {"messages": [{"role": "user", "content": f"question {i} " * 40}]})
        if resp.status_code != 200:
            refused = resp
            break
        answered.append(resp.headers["x-mixroute-request-id"])
    return answered, refused


def _count(url: str, table: str, ids: list[str]) -> int:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return conn.execute(sa.text(f"SELECT count(*) FROM {table} WHERE request_id = ANY(:ids)"),
                                {"ids": ids}).scalar_one()
    finally:
        engine.dispose()


def _wait_count(url: str, table: str, ids: list[str], timeout: float = 30) -> int:
    deadline = time.monotonic() + timeout
    while True:
        try:
            n = _count(url, table, ids)
        except sa.exc.OperationalError:
            n = -1
        if n == len(ids) or time.monotonic() > deadline:
            return n
        time.sleep(0.2)


def test_refuses_new_requests_rather_than_lose_their_records(pg, tmp_path) -> None:
    gw = start_gateway(tmp_path, POLICY, database_url=pg.url, store_journal_path=str(tmp_path / "j.jsonl"),
                       store_journal_max_bytes=MAX_BYTES, store_flush_interval_s=0.02)
    try:
        pg.stop()
        answered, refused = _ask_until_refused(gw)
        assert refused is not None and refused.status_code == 503, "never refused: records were being lost"
        assert refused.json()["error"]["code"] == "store_unavailable"
        # Every door's request path checks it, not only chat.
        for path, body in (("/responses", {"input": "hi"}), ("/embeddings", {"input": "hi"}),
                           ("/completions", {"prompt": "hi"})):
            resp = _post(gw, path, body)
            assert resp.status_code == 503, (path, resp.text)
            assert resp.json()["error"]["code"] == "store_unavailable", (path, resp.text)
        dry_run = _post(gw, "/route", {"messages": [{"role": "user", "content": "hi"}]})
        assert dry_run.status_code == 200  # a dry run stores nothing
        assert len(answered) > 10
        ready = httpx.get(gw.url + "/readyz", timeout=10)  # a load balancer sends traffic elsewhere
        assert ready.status_code == 503 and ready.json()["status"] == "store_unavailable"
        pg.start()
        assert _wait_count(pg.url, "decisions", answered) == len(answered)
        assert _wait_count(pg.url, "outcomes", answered) == len(answered)
        deadline = time.monotonic() + 10
        back = {"messages": [{"role": "user", "content": "back"}]}
        while (resp := _post(gw, "/chat/completions", back)).status_code != 200:
            assert time.monotonic() < deadline, resp.text
            time.sleep(0.2)
        assert httpx.get(gw.url + "/readyz", timeout=10).status_code == 200
    finally:
        gw.stop()


def test_serve_answers_and_says_records_are_lost(pg, tmp_path, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="mixroute.store"):
        gw = start_gateway(tmp_path, POLICY, database_url=pg.url, store_journal_path=str(tmp_path / "j.jsonl"),
                           store_journal_max_bytes=MAX_BYTES, store_flush_interval_s=0.02, store_on_loss="serve")
        try:
            assert "MIXROUTE_STORE_ON_LOSS=serve" in caplog.text
            pg.stop()
            answered, refused = _ask_until_refused(gw, limit=120)
            assert refused is None and len(answered) == 120
            assert "are served and their records lost" in caplog.text
        finally:
            gw.stop()
