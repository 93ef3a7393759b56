"""Sessions named by a door's dialect: a Responses ``previous_response_id`` chain continues
its session (even when the chain's items no longer extend the earlier message list), and a
door's explicit hint (the Messages door's ``metadata.user_id``) names one."""

from __future__ import annotations

import uuid

import httpx
import pytest

from gateway.sessions import Sessions, session_hint
from router.engine import Router
from router.policy import parse_policy
from tests.gateway.test_sessions import POLICY, _session_of


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    from tests.gateway.conftest import start_gateway

    gateway = start_gateway(tmp_path_factory.mktemp("sessions-doors"), POLICY)
    yield gateway
    gateway.stop()


def _respond(gw, body: dict, headers: dict | None = None) -> httpx.Response:
    resp = httpx.post(gw.v1 + "/responses", json={"model": "auto", **body}, headers=headers or {}, timeout=30)
    assert resp.status_code == 200, resp.text
    return resp


def test_a_previous_response_id_chain_continues_its_session(gw):
    # Each turn changes its instructions, so its message list never extends the one before:
    # only the chain ties the turns into one session.
    first = _respond(gw, {"instructions": "Plan first.", "input": f"Task {uuid.uuid4().hex}"}, {"x-escalate": "1"})
    assert first.headers["x-mixroute-backend"] == "strong"
    session = _session_of(gw, first)
    assert session["turn"] == 1 and not session["explicit"]
    previous = first
    for turn in (2, 3):
        resp = _respond(gw, {"instructions": f"Step {turn} now.", "input": "go on",
                             "previous_response_id": previous.json()["id"]})
        assert resp.headers["x-mixroute-backend"] == "strong"  # alone it would go to mid
        assert resp.headers["x-mixroute-reason"] == "session_kept"
        s = _session_of(gw, resp)
        assert s["id"] == session["id"] and s["turn"] == turn and s["on"] == "strong"
        previous = resp


def test_without_the_chain_the_same_turn_starts_a_new_session(gw):
    first = _respond(gw, {"instructions": "Plan first.", "input": f"Task {uuid.uuid4().hex}"}, {"x-escalate": "1"})
    resp = _respond(gw, {"instructions": "Step 2 now.", "input": "go on"})
    assert resp.headers["x-mixroute-backend"] == "mid"
    assert _session_of(gw, resp)["id"] != _session_of(gw, first)["id"]


def test_a_door_hint_names_the_session_after_the_header():
    body = {"user": "u1", "prompt_cache_key": "k"}
    assert session_hint({}, body, "metadata.user_id:abc") == ("metadata.user_id:abc", True)
    assert session_hint({"x-mixroute-session": "h"}, body, "metadata.user_id:abc") == ("h", True)
    assert session_hint({}, body, None) == ("prompt_cache_key:k", True)
    assert session_hint({}, body, "x" * 300)[0] == "x" * 256


async def test_a_door_hint_joins_turns_with_unrelated_messages():
    router = Router(parse_policy(POLICY))
    sessions = Sessions()
    first = await sessions.open(router, "acme", {}, {"model": "auto", "messages": [{"role": "user", "content": "a"}]},
                                hint="metadata.user_id:u-1")
    await sessions.close(first, "strong", True, 10, tokens_out=5)
    again = await sessions.open(router, "acme", {}, {"model": "auto", "messages": [{"role": "user", "content": "b"}]},
                                hint="metadata.user_id:u-1")
    assert again.key == first.key and again.state.backend == "strong" and again.state.turns == 1
    other = await sessions.open(router, "globex", {}, {"model": "auto", "messages": [{"role": "user", "content": "b"}]},
                                hint="metadata.user_id:u-1")
    assert other.key != first.key and other.state.turns == 0


@pytest.mark.parametrize("value", [b"x" * 257, b"caf\xe9\x85"])  # \x85: a C1 control (NEL)
def test_a_bad_session_header_on_the_responses_door_is_a_400_in_its_envelope(gw, value):
    resp = httpx.post(gw.v1 + "/responses", json={"model": "auto", "input": "hi"},
                      headers={"x-mixroute-session": value}, timeout=30)
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["param"] == "x-mixroute-session" and error["code"] == "invalid_session"
