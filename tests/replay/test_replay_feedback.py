"""``mixroute replay --feedback``: each answer is rated with its model's recorded score on a
real gateway, and the gateway's outcome memory learns from it."""

from __future__ import annotations

import time

import httpx
import sqlalchemy as sa
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from gateway.commands.replay import prepare, send_all
from tests.gateway.conftest import start_gateway
from tests.replay.tiny import write_bench


def _rows(db: str, sql: str) -> list[tuple]:
    engine = sa.create_engine(db)
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(sa.text(sql))]
    finally:
        engine.dispose()


async def test_replay_rates_each_answer_and_the_gateway_observes_it(tmp_path) -> None:
    plan, rows = prepare([write_bench(tmp_path)])
    gw = start_gateway(tmp_path, plan.policy_yaml() + "learning: {}\n", learning_refresh_s=0.1,
                       store_flush_interval_s=0.02)
    try:
        answered = await send_all(gw.url, plan, rows, concurrency=1, feedback=True)
        assert all(a.model is not None and a.feedback_error is None for a in answered), answered
        expected = sorted((a.backend, a.row.scores[a.model]) for a in answered)
        deadline = time.monotonic() + 10
        got = []
        while time.monotonic() < deadline and len(got) < len(answered):
            got = _rows(gw.settings.database_url, "SELECT backend, score, source FROM observations")
            time.sleep(0.05)
        assert sorted((b, s) for b, s, _ in got) == expected
        assert {src for *_, src in got} == {"feedback"}
        assert _rows(gw.settings.database_url, "SELECT DISTINCT source FROM feedback") == [("replay",)]
    finally:
        gw.stop()


async def test_a_rating_the_gateway_refuses_is_reported_per_answer(tmp_path) -> None:
    plan, rows = prepare([write_bench(tmp_path)], n=1)
    app = FastAPI()
    names = {model: name for name, model in plan.names.items()}

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        return JSONResponse({"choices": [{"message": {"content": "B"}}], "model": "big/model-1"},
                            headers={"x-mixroute-backend": names["big/model-1"], "x-mixroute-request-id": "r1"})

    @app.post("/v1/feedback")
    async def feedback(request: Request):
        return JSONResponse({"error": {"message": "No request with id 'r1'"}}, status_code=404)

    [answer] = await send_all("http://stub", plan, rows, feedback=True, transport=httpx.ASGITransport(app=app))
    assert answer.model == "big/model-1" and answer.feedback_error == "HTTP 404: No request with id 'r1'"


