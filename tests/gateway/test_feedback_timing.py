"""Feedback tells no tenant which request ids exist (same answer, same time, for another
tenant's request and an unknown one), and a flood of it stays off the request path."""

from __future__ import annotations

import asyncio
import statistics
import time

import httpx
import pytest

from gateway.auth.keys import create_key
from gateway.store.db import make_engine, upgrade
from tests.gateway.conftest import start_gateway
from tests.gateway.test_feedback import MSG, POLICY


@pytest.fixture(scope="module")
def keyed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("feedback-timing")
    db = f"sqlite:///{tmp}/keys.db"
    engine = make_engine(db)
    upgrade(engine)
    keys = {t: create_key(engine, tenant=t)[0] for t in ("acme", "globex")}
    engine.dispose()
    gw = start_gateway(tmp, POLICY, database_url=db, admin_key="admin-secret", feedback_max_pending=1000)
    yield gw, keys
    gw.stop()


def _rate(gw, key: str, request_id: str) -> httpx.Response:
    return httpx.post(gw.v1 + "/feedback", json={"request_id": request_id, "score": 0.3},
                      headers={"authorization": f"Bearer {key}"}, timeout=30)


def test_another_tenants_request_and_an_unknown_one_look_the_same(keyed) -> None:
    gw, keys = keyed
    resp = httpx.post(gw.v1 + "/chat/completions", json={"messages": MSG},
                      headers={"authorization": f"Bearer {keys['acme']}"}, timeout=30)
    rid = resp.headers["x-mixroute-request-id"]
    foreign, unknown = [], []
    for i in range(15):
        for ids, target in ((foreign, rid), (unknown, f"mr-unknown-{i}")):
            started = time.perf_counter()
            r = _rate(gw, keys["globex"], target)
            ids.append(time.perf_counter() - started)
            assert r.status_code == 202 and set(r.json()) == {"id", "object", "request_id"}
    # The old answer took a second to say "unknown" and 2 ms to say "someone else's".
    assert statistics.median(foreign) < 0.2 and statistics.median(unknown) < 0.2
    assert abs(statistics.median(foreign) - statistics.median(unknown)) < 0.05


def test_a_flood_of_unknown_ids_is_answered_at_once(keyed) -> None:
    gw, keys = keyed

    async def flood() -> list[tuple[int, float]]:
        slots = asyncio.Semaphore(32)  # 32 in flight: time each from its send, not its wait for a slot
        async with httpx.AsyncClient(base_url=gw.v1, timeout=60,
                                     headers={"authorization": f"Bearer {keys['globex']}"}) as client:
            async def one(i: int) -> tuple[int, float]:
                async with slots:
                    started = time.perf_counter()
                    r = await client.post("/feedback", json={"request_id": f"mr-flood-{i}", "label": "bad"})
                    return r.status_code, time.perf_counter() - started
            return await asyncio.gather(*(one(i) for i in range(400)))

    results = asyncio.run(flood())
    assert {code for code, _ in results} == {202}
    # Answered without waiting for the lookup (the old answer took at least a second each,
    # holding a thread of the request path's pool while it polled).
    assert statistics.median(t for _, t in results) < 0.5
    chat = httpx.post(gw.v1 + "/chat/completions", json={"messages": MSG},
                      headers={"authorization": f"Bearer {keys['acme']}"}, timeout=30)
    assert chat.status_code == 200 and chat.elapsed.total_seconds() < 1.0


def test_a_full_backlog_is_a_503_for_every_id_alike(tmp_path) -> None:
    gw = start_gateway(tmp_path, POLICY, feedback_max_pending=3)
    try:
        codes = []
        for i in range(12):
            r = httpx.post(gw.v1 + "/feedback", json={"request_id": f"mr-none-{i}", "score": 1}, timeout=10)
            codes.append(r.status_code)
            if r.status_code == 503:
                assert r.json()["error"]["code"] == "feedback_backlog_full" and r.headers["retry-after"] == "1"
        assert codes[:3] == [202, 202, 202] and 503 in codes
        time.sleep(1.6)  # the unknown ones are dropped after a second: room again
        assert httpx.post(gw.v1 + "/feedback", json={"request_id": "mr-late", "score": 1}).status_code == 202
    finally:
        gw.stop()
