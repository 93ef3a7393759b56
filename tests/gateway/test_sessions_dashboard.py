"""The dashboard's sessions: turns, switches, escalations, cached share and cost per session,
from the decision and outcome rows, over HTTP."""

from __future__ import annotations

import time
import uuid

import httpx
import pytest

from tests.gateway.conftest import start_gateway, wait_row
from tests.gateway.test_sessions import POLICY

RULES = POLICY + "  - {name: cheap, when_header: x-cheap, allow_backends: [mid]}\n"


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    gateway = start_gateway(tmp_path_factory.mktemp("sessions-dash"), RULES)
    yield gateway
    gateway.stop()


def _turn(gw, sid: str, headers: dict | None = None) -> httpx.Response:
    resp = httpx.post(gw.v1 + "/chat/completions", timeout=30, headers={"x-mixroute-session": sid, **(headers or {})},
                      json={"model": "auto", "messages": [{"role": "user", "content": f"turn {uuid.uuid4().hex}"}]})
    assert resp.status_code == 200, resp.text
    wait_row(gw.settings.database_url, "outcomes", resp.headers["x-mixroute-request-id"])
    return resp


def _sessions(gw, **params) -> httpx.Response:
    return httpx.get(gw.url + "/dashboard/api/sessions", params=params, timeout=30)


def test_a_session_is_listed_with_its_turns_switches_and_cost(gw):
    sid = f"dash-{uuid.uuid4().hex}"
    costs = [float(_turn(gw, sid, {"x-escalate": "1"}).headers["x-mixroute-cost-usd"])]
    costs.append(float(_turn(gw, sid).headers["x-mixroute-cost-usd"]))  # kept on strong
    costs.append(float(_turn(gw, sid, {"x-cheap": "1"}).headers["x-mixroute-cost-usd"]))  # a rule moves it
    other = f"dash-{uuid.uuid4().hex}"
    _turn(gw, other)
    time.sleep(0.2)
    data = _sessions(gw, since="1h").json()
    mine = next(s for s in data["sessions"] if s["id"] == sid)
    assert mine["turns"] == 3 and mine["switches"] == 1 and mine["escalations"] == 0
    assert mine["backends"] == ["strong", "mid"] and mine["route"] == "auto" and mine["explicit"]
    assert mine["cost_usd"] == pytest.approx(sum(costs), rel=1e-6)
    assert mine["tokens_in"] > 0 and mine["cached_share"] == mine["tokens_cached"] / mine["tokens_in"]
    assert next(s for s in data["sessions"] if s["id"] == other)["turns"] == 1
    assert data["totals"]["sessions"] >= 2 and data["totals"]["turns"] >= 4
    # Most expensive first, and the limit cuts the list, not the totals.
    costs_listed = [s["cost_usd"] for s in data["sessions"]]
    assert costs_listed == sorted(costs_listed, reverse=True)
    one = _sessions(gw, since="1h", limit=1).json()
    assert len(one["sessions"]) == 1 and one["totals"] == data["totals"]


def test_requests_outside_sessions_are_not_listed(gw):
    resp = httpx.post(gw.v1 + "/chat/completions", timeout=30,
                      json={"model": "solo", "messages": [{"role": "user", "content": "alone"}]})
    wait_row(gw.settings.database_url, "outcomes", resp.headers["x-mixroute-request-id"])
    assert all(s["route"] != "solo" for s in _sessions(gw, since="1h").json()["sessions"])


def test_bad_parameters_are_a_400_and_the_page_is_served(gw):
    bad = _sessions(gw, limit=0)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "limit"
    assert _sessions(gw, since="yesterday").status_code == 400
    page = httpx.get(gw.url + "/dashboard/sessions", timeout=10)
    assert page.status_code == 200 and "/dashboard/static/sessions.js" in page.text
    assert httpx.get(gw.url + "/dashboard/static/sessions.js", timeout=10).status_code == 200
