"""The Responses door while the store's PostgreSQL is down (a private server, stopped and
started again): answers still go out, reads of stored responses are a 503, and the
responses stored before the outage are continued once it is back."""

from __future__ import annotations

import httpx
import pytest

from tests.gateway.conftest import start_gateway
from tests.store.pg_server import PrivatePostgres, unavailable

POLICY = """version: 1
backends:
  - {name: plain, kind: fake, model: plain-model, quality: 0.9, pricing: {input_per_1m: 1, output_per_1m: 2}}
routes:
  - {name: auto, backends: [plain]}
"""


@pytest.fixture
def pg():
    reason = unavailable()
    if reason:
        pytest.skip(f"cannot start a private PostgreSQL server: {reason}")
    try:
        server = PrivatePostgres()
        server.start()
    except Exception as exc:  # initdb/pg_ctl refused in this environment
        pytest.skip(f"cannot start a private PostgreSQL server: {exc}")
    yield server
    server.destroy()


def _create(gw, **body) -> httpx.Response:
    return httpx.post(gw.v1 + "/responses", json={"model": "auto", **body}, timeout=30)


def test_store_down_answers_still_go_out(pg, tmp_path):
    gw = start_gateway(tmp_path, POLICY, database_url=pg.url, store_journal_path=str(tmp_path / "journal.jsonl"))
    try:
        before = _create(gw, input="Before the outage")
        assert before.status_code == 200
        pg.stop()
        during = _create(gw, input="During the outage")
        assert during.status_code == 200 and during.json()["output"][0]["content"][0]["text"]
        continued = _create(gw, input="more", previous_response_id=before.json()["id"])
        assert continued.status_code == 503
        assert continued.json()["error"]["code"] == "store_unavailable"
        assert continued.json()["error"]["param"] == "previous_response_id"
        got = httpx.get(f"{gw.v1}/responses/{before.json()['id']}", timeout=30)
        assert got.status_code == 503 and got.json()["error"]["code"] == "store_unavailable"
        pg.start()
        again = _create(gw, input="more", previous_response_id=before.json()["id"])
        assert again.status_code == 200, again.text
        # The one answered during the outage was not kept: a clear 404, not a shorter conversation.
        lost = _create(gw, input="more", previous_response_id=during.json()["id"])
        assert lost.status_code == 404 and lost.json()["error"]["param"] == "previous_response_id"
    finally:
        gw.stop()
