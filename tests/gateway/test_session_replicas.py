"""Replica stickiness over HTTP: a session routed to a vLLM pool (fake replicas, real
sockets) stays on one replica, also when its turns alternate between two gateway processes
sharing Redis; a request outside a session is placed by load as before."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import httpx
import pytest

from bench.fake_vllm import ReplicaModel, ReplicaServers, serve_replicas
from tests.conftest import redis_test_prefix
from tests.gateway.conftest import Gateway, start_gateway

REDIS_URL = os.environ.get("MIXROUTE_TEST_REDIS_URL")
HEADER = "x-mixroute-session"


@pytest.fixture(scope="module")
def replicas() -> Iterator[ReplicaServers]:
    servers = serve_replicas(3, ReplicaModel(prefill_base_s=0, prefill_s_per_token=0, itl_s=0, output_tokens=2),
                             name="m")
    yield servers
    servers.stop()


def _policy(servers: ReplicaServers) -> str:
    urls = ", ".join(f'"{u}"' for u in servers.urls)
    return f"""version: 1
backends:
  - {{name: pool, kind: vllm, model: m, endpoints: [{urls}], options: {{metrics_interval_s: 0}}}}
routes:
  - {{name: auto, backends: [pool]}}
"""


@pytest.fixture(scope="module")
def gw(tmp_path_factory, replicas) -> Iterator[Gateway]:
    gateway = start_gateway(tmp_path_factory.mktemp("session-replicas"), _policy(replicas))
    yield gateway
    gateway.stop()


def _served_by(servers: ReplicaServers, gw: Gateway, text: str, session: str | None = None) -> int:
    """Send one short chat turn (under one affinity block, so no prefix to follow); the index
    of the replica that served it."""
    before = [r.state.requests for r in servers.replicas]
    resp = httpx.post(gw.v1 + "/chat/completions", json={"model": "auto", "messages": [
        {"role": "user", "content": text}]}, headers={HEADER: session} if session else {}, timeout=30)
    assert resp.status_code == 200, resp.text
    [index] = [i for i, r in enumerate(servers.replicas) if r.state.requests > before[i]]
    return index


def test_requests_outside_a_session_are_spread_by_load(gw, replicas):
    assert len({_served_by(replicas, gw, f"hi {i}") for i in range(3)}) == 3


def test_a_session_stays_on_its_replica(gw, replicas):
    session = f"agent-{uuid.uuid4().hex}"
    served = [_served_by(replicas, gw, f"step {i}", session) for i in range(6)]
    assert len(set(served)) == 1, served
    other = [_served_by(replicas, gw, f"step {i}", f"{session}-b") for i in range(3)]
    assert len(set(other)) == 1
    # /v1/route names the session's replica and why
    route = httpx.post(gw.v1 + "/route", json={"model": "auto", "messages": [{"role": "user", "content": "next"}]},
                       headers={HEADER: session}, timeout=30).json()
    assert route["replica_reason"] == "session" and route["replica"] == replicas.urls[served[0]]


@pytest.mark.skipif(not REDIS_URL, reason="MIXROUTE_TEST_REDIS_URL not set")
def test_two_gateways_sharing_redis_keep_a_session_on_one_replica(tmp_path, replicas):
    """The second gateway never chose a replica for the session; the shared session state
    tells it where the last turn was answered."""
    prefix = redis_test_prefix()
    gws = []
    for i in range(2):
        (tmp_path / f"g{i}").mkdir()
        gws.append(start_gateway(tmp_path / f"g{i}", _policy(replicas), redis_url=REDIS_URL, redis_prefix=prefix))
    try:
        # Move the first gateway's least-loaded cursor on: alone, the two gateways would now
        # place the same request on different replicas.
        _served_by(replicas, gws[0], "warm up")
        session = f"agent-{uuid.uuid4().hex}"
        served = [_served_by(replicas, gws[turn % 2], f"turn {turn}", session) for turn in range(6)]
        assert len(set(served)) == 1, served
    finally:
        for g in gws:
            g.stop()
