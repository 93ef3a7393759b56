"""``mixroute_sessions_live`` on ``/metrics`` counts the sessions a gateway holds."""

from __future__ import annotations

import re
import uuid

import httpx

from tests.gateway.conftest import start_gateway
from tests.gateway.test_sessions import POLICY


def _live(gw) -> float:
    text = httpx.get(gw.url + "/metrics", timeout=10).text
    return float(re.search(r"^mixroute_sessions_live (\S+)$", text, re.M).group(1))


def test_the_live_sessions_gauge_counts_new_sessions(tmp_path):
    gw = start_gateway(tmp_path, POLICY)
    try:
        assert _live(gw) == 0
        for _ in range(3):
            httpx.post(gw.v1 + "/chat/completions", timeout=30, json={
                "model": "auto", "messages": [{"role": "user", "content": f"new {uuid.uuid4().hex}"}]})
        sid = {"x-mixroute-session": "one"}
        for _ in range(2):  # two turns of one session count once
            httpx.post(gw.v1 + "/chat/completions", headers=sid, timeout=30,
                       json={"model": "auto", "messages": [{"role": "user", "content": "hi"}]})
        httpx.post(gw.v1 + "/chat/completions", timeout=30,  # sessions off on this route
                   json={"model": "solo", "messages": [{"role": "user", "content": f"x {uuid.uuid4().hex}"}]})
        assert _live(gw) == 4
    finally:
        gw.stop()
