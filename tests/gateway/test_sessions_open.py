"""A new session over HTTP opens where the route's sessions are cheapest over their turns,
not where its first turn alone is cheapest (router.session.open_session)."""

from __future__ import annotations

import json
import uuid

import httpx
import pytest

from tests.gateway.conftest import start_gateway, wait_row

# Both clear the bar. `nocache` bills every prompt token at 0.9; `cachey` writes a prompt at
# 1.25 and reads it back at 0.1 (Anthropic's shape): dearer for one turn, cheaper for several.
POLICY = """version: 1
backends:
  - {name: cachey, kind: fake, model: cachey-model, quality: 0.86,
     pricing: {input_per_1m: 1, output_per_1m: 5, cached_input_per_1m: 0.1, cache_write_input_per_1m: 1.25}}
  - {name: nocache, kind: fake, model: nocache-model, quality: 0.86, pricing: {input_per_1m: 0.9, output_per_1m: 5}}
routes:
  - {name: auto, backends: [cachey, nocache], quality_bar: {target: 0.95}}
"""
SYSTEM = {"role": "system", "content": "You are a careful coding agent with many tools. " * 400}


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    gateway = start_gateway(tmp_path_factory.mktemp("sessions-open"), POLICY)
    yield gateway
    gateway.stop()


def _chat(gw, messages, sid):
    resp = httpx.post(gw.v1 + "/chat/completions", json={"model": "auto", "messages": messages},
                      headers={"x-mixroute-session": sid}, timeout=30)
    assert resp.status_code == 200, resp.text
    return resp


def _session_of(gw, resp) -> dict:
    row = wait_row(gw.settings.database_url, "decisions", resp.headers["x-mixroute-request-id"])
    signals = row["signals"] if isinstance(row["signals"], dict) else json.loads(row["signals"])
    return signals["session"]


def test_a_session_opens_where_its_expected_turns_cost_least(gw):
    # The route has seen no session: the first one opens on the turn's cheapest.
    sid = f"first-{uuid.uuid4().hex}"
    messages = [SYSTEM, {"role": "user", "content": "Start the refactor."}]
    resp = _chat(gw, messages, sid)
    assert resp.headers["x-mixroute-backend"] == "nocache"
    assert "switch" not in _session_of(gw, resp)
    for turn in range(5):  # it goes on for six turns, on nocache (no downgrade by default)
        answer = resp.json()["choices"][0]["message"]["content"]
        messages = [*messages, {"role": "assistant", "content": answer}, {"role": "user", "content": f"step {turn}"}]
        resp = _chat(gw, messages, sid)
        assert resp.headers["x-mixroute-backend"] == "nocache"
    # Sessions on this route now run six turns: a new one opens on cachey, whose write pays
    # back over them, and the decision row prices both sides.
    resp = _chat(gw, [SYSTEM, {"role": "user", "content": "Another task."}], f"second-{uuid.uuid4().hex}")
    assert resp.headers["x-mixroute-backend"] == "cachey"
    assert resp.headers["x-mixroute-reason"] == "session_opened"
    session = _session_of(gw, resp)
    switch = session["switch"]
    assert session["turn"] == 1 and session["on"] is None
    assert switch["verdict"] == "open" and switch["move_to"] == "cachey" and switch["instead_of"] == "nocache"
    assert switch["expected_rest"] == 6 and switch["stay_usd"] < switch["move_usd"]  # dearer for the turn alone
    assert switch["move_usd"] + 5 * switch["move_warm_usd"] < switch["stay_usd"] + 5 * switch["stay_warm_usd"]
