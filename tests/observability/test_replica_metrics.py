"""Per-replica gauges of a vLLM pool on ``GET /metrics`` and the replica in ``POST /v1/route``,
through a real gateway in front of fake vLLM replicas served over HTTP (bench.fake_vllm)."""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from bench.fake_vllm import ReplicaModel, ReplicaServers, serve_replicas
from tests.backends.test_affinity import chooser_state, conv
from tests.gateway.conftest import Gateway, start_gateway

STREAMY = ReplicaModel(prefill_base_s=0.0, prefill_s_per_token=0.0, itl_s=0.05, output_tokens=20, capacity_blocks=512)
REPLICA_GAUGES = ("healthy", "in_flight", "requests_waiting", "requests_running", "kv_cache_usage_ratio",
                  "prefix_cache_hit_ratio", "scrape_age_seconds")


def samples(text: str, name: str) -> dict[tuple[str, str], float]:
    """``{(backend, replica): value}`` of one ``mixroute_replica_*`` gauge (absent replicas absent)."""
    out = {}
    for m in re.finditer(rf'^{name}\{{backend="([^"]*)",replica="([^"]*)"\}} (\S+)$', text, re.M):
        out[(m.group(1), m.group(2))] = float(m.group(3))
    return out


def wait_for(pred, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError("condition not met in time")


def dead_url() -> str:
    """A loopback ``/v1`` URL nothing listens on (connections are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/v1"


@pytest.fixture(scope="module")
def pool_gateway(tmp_path_factory) -> Iterator[tuple[Gateway, ReplicaServers, str]]:
    servers = serve_replicas(2, STREAMY)
    dead = dead_url()
    endpoints = ", ".join(f'"{u}"' for u in [*servers.urls, dead])
    tmp = tmp_path_factory.mktemp("replicas")
    policy = f"""version: 1
backends:
  - {{name: pool, kind: vllm, model: m, endpoints: [{endpoints}], quality: 0.9,
     options: {{metrics_interval_s: 0.2, eject_after: 1, retry_ejected_s: 3600}}}}
  - {{name: other, kind: fake, model: demo, quality: 0.9}}
routes:
  - {{name: auto, backends: [pool]}}
  - {{name: plain, backends: [other]}}
"""
    gw = start_gateway(tmp, policy, policy_watch=True)
    try:
        yield gw, servers, dead
    finally:
        gw.stop()
        servers.stop()


def metrics(gw: Gateway) -> str:
    return httpx.get(gw.url + "/metrics", timeout=10).text


def metrics_when(gw: Gateway, pred) -> str:
    """The first ``/metrics`` text for which ``pred(text)`` holds (polled for up to 10 s)."""
    return wait_for(lambda: (lambda t: t if pred(t) else None)(metrics(gw)))


def chooser(gw: Gateway):
    """The live pool's chooser (the gateway runs in this process, in a thread)."""
    return gw.server.config.app.state.policies.current.backends["pool"].pool.chooser


def test_replica_gauges_carry_scraped_state_and_an_ejected_replica_is_unhealthy(pool_gateway):
    gw, servers, dead = pool_gateway
    urls = servers.urls
    text = metrics_when(gw, lambda t: all(("pool", u) in samples(t, "mixroute_replica_requests_waiting") for u in urls)
                        and samples(t, "mixroute_replica_healthy").get(("pool", dead)) == 0)
    healthy = samples(text, "mixroute_replica_healthy")
    assert healthy == {("pool", urls[0]): 1.0, ("pool", urls[1]): 1.0, ("pool", dead): 0.0}
    assert samples(text, "mixroute_replica_in_flight") == dict.fromkeys(healthy, 0.0)
    for gauge in ("requests_waiting", "requests_running", "kv_cache_usage_ratio", "scrape_age_seconds"):
        got = samples(text, f"mixroute_replica_{gauge}")
        assert set(got) == {("pool", u) for u in urls}, gauge  # never scraped: absent, not 0
        assert all(v >= 0 for v in got.values())
    assert not samples(text, "mixroute_replica_prefix_cache_hit_ratio")  # no prompt looked up yet
    assert all(f"# TYPE mixroute_replica_{g} gauge" in text for g in REPLICA_GAUGES)
    assert 'backend="other"' not in "".join(line for line in text.splitlines() if "mixroute_replica_" in line)

    # A stream held open is in flight on one replica; afterwards the prefix-cache counters
    # the replica reported give its hit ratio (the same prompt twice: the second one hits).
    body = {**conv(3), "model": "auto", "stream": True}
    with httpx.stream("POST", gw.v1 + "/chat/completions", json=body, timeout=10) as r:
        assert r.status_code == 200
        lines = r.iter_lines()  # kept: a dropped iterator closes the response, and the gateway cancels the stream
        next(lines)
        busy = {k: v for k, v in samples(metrics(gw), "mixroute_replica_in_flight").items() if v}
        [(home, n)] = busy.items()
        assert n == 1.0 and home[1] in urls
        assert any("[DONE]" in line for line in lines)
    assert httpx.post(gw.v1 + "/chat/completions", json={**body, "stream": False}, timeout=10).status_code == 200
    ratio = wait_for(lambda: samples(metrics(gw), "mixroute_replica_prefix_cache_hit_ratio").get(home))
    assert 0 < ratio < 1
    assert samples(metrics(gw), "mixroute_replica_in_flight")[home] == 0


def test_route_dry_run_names_the_replica_without_changing_the_chooser(pool_gateway):
    gw, servers, dead = pool_gateway
    urls = servers.urls
    wait_for(lambda: samples(metrics(gw), "mixroute_replica_healthy").get(("pool", dead)) == 0)
    body = {**conv(11), "model": "auto"}
    before = chooser_state(chooser(gw))
    first = httpx.post(gw.v1 + "/route", json=body, timeout=10).json()
    second = httpx.post(gw.v1 + "/route", json=body, timeout=10).json()
    assert chooser_state(chooser(gw)) == before
    assert first["chosen"] == "pool" and first["replica"] in urls  # never the ejected one
    assert first["replica_reason"] == "rendezvous"  # a prefix the pool has not seen
    assert (second["replica"], second["replica_reason"]) == (first["replica"], first["replica_reason"])

    served = {u: s.state.requests for u, s in zip(urls, servers.replicas)}
    assert httpx.post(gw.v1 + "/chat/completions", json=body, timeout=10).status_code == 200
    after = {u: s.state.requests for u, s in zip(urls, servers.replicas)}
    assert [u for u in urls if after[u] > served[u]] == [first["replica"]]  # the preview was the real choice
    again = httpx.post(gw.v1 + "/route", json={**conv(11, 2), "model": "auto"}, timeout=10).json()
    # the next turn continues the conversation's session (found by its lineage): its replica
    assert (again["replica"], again["replica_reason"]) == (first["replica"], "session")

    plain = httpx.post(gw.v1 + "/route", json={**body, "model": "plain"}, timeout=10).json()
    assert plain["chosen"] == "other" and plain["replica"] is None and plain["replica_reason"] is None


def test_replicas_of_a_removed_backend_leave_the_output(pool_gateway):
    gw, servers, dead = pool_gateway
    urls = servers.urls
    wait_for(lambda: ("pool", urls[0]) in samples(metrics(gw), "mixroute_replica_healthy"))
    path = gw.settings.policy_path
    time.sleep(0.5)  # let the watcher start
    path.write_text("""version: 1
backends:
  - {name: other, kind: fake, model: demo, quality: 0.9}
routes:
  - {name: auto, backends: [other]}
""")
    text = metrics_when(gw, lambda t: "mixroute_replica_healthy{" not in t)
    assert not any(samples(text, f"mixroute_replica_{g}") for g in REPLICA_GAUGES)
    assert "# TYPE mixroute_replica_healthy gauge" in text


def test_a_tenant_key_sees_the_reason_but_not_the_replica_address(tmp_path):
    """Replica URLs are internal addresses: ``/v1/route`` gives them to the admin key (and to
    everyone while auth is off), a tenant's key sees only the chooser's reason."""
    from gateway.auth.keys import create_key
    from gateway.store.db import make_engine, upgrade

    servers = serve_replicas(1, STREAMY)
    db = f"sqlite:///{tmp_path}/keys.db"
    engine = make_engine(db)
    upgrade(engine)
    key, _ = create_key(engine, "acme")
    engine.dispose()
    policy = f"""version: 1
backends:
  - {{name: pool, kind: vllm, model: m, endpoints: ["{servers.urls[0]}"], quality: 0.9}}
routes:
  - {{name: auto, backends: [pool]}}
"""
    gw = start_gateway(tmp_path, policy, database_url=db, admin_key="sk-admin-test")
    try:
        body = {**conv(5), "model": "auto"}
        tenant = httpx.post(gw.v1 + "/route", json=body, headers={"authorization": f"Bearer {key}"}, timeout=10)
        admin = httpx.post(gw.v1 + "/route", json=body, headers={"authorization": "Bearer sk-admin-test"},
                           timeout=10)
        assert tenant.status_code == admin.status_code == 200
        assert tenant.json()["replica"] is None and tenant.json()["replica_reason"] == "rendezvous"
        assert admin.json()["replica"] == servers.urls[0]
    finally:
        gw.stop()
        servers.stop()


def test_with_every_replica_ejected_the_route_preview_names_what_dispatch_tries(tmp_path, caplog):
    """From a break-it pass: with every replica ejected ``/v1/route`` still said ``rendezvous``.
    Dispatch fails open (the chooser picks among all replicas), and the preview now says so
    (``all_ejected``). The endpoints carry credentials: they reach the replicas (basic auth)
    but no metric label, log line or ``/v1/route`` answer."""
    import base64
    import logging

    from starlette.applications import Starlette
    from starlette.responses import Response
    from starlette.routing import Mount, Route

    from tests.backends.fake_upstream import UpstreamState, create_app, serve_in_thread

    caplog.set_level(logging.WARNING)
    state = UpstreamState()
    failing_metrics = Route("/{replica}/metrics", lambda request: Response("exporter down", status_code=500))
    upstream = serve_in_thread(state, app=Starlette(routes=[failing_metrics, Mount("/", app=create_app(state))]))
    urls = [upstream.v1("r1"), upstream.v1("r2")]
    endpoints = ", ".join(f'"{u.replace("http://", "http://vllm:s3cret@")}"' for u in urls)
    policy = f"""version: 1
backends:
  - {{name: pool, kind: vllm, model: m, endpoints: [{endpoints}], quality: 0.9,
     options: {{metrics_interval_s: 0.2, eject_after: 1, retry_ejected_s: 3600}}}}
routes:
  - {{name: auto, backends: [pool]}}
"""
    gw = start_gateway(tmp_path, policy)
    try:
        text = metrics_when(gw, lambda t: samples(t, "mixroute_replica_healthy") == {("pool", u): 0.0 for u in urls})
        body = {**conv(4), "model": "auto"}
        route = httpx.post(gw.v1 + "/route", json=body, timeout=10)
        assert route.json()["replica_reason"] == "all_ejected" and route.json()["replica"] in urls
        assert httpx.post(gw.v1 + "/chat/completions", json=body, timeout=10).status_code == 200
        [sent] = state.requests
        assert upstream.v1(sent["replica"]) == route.json()["replica"]  # the preview was the real choice
        assert sent["headers"]["authorization"] == "Basic " + base64.b64encode(b"vllm:s3cret").decode()
        assert "ejected after 1 failures" in caplog.text
        assert all("s3cret" not in t for t in (text, route.text, caplog.text))
    finally:
        gw.stop()
        upstream.stop()
