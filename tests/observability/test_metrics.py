"""``GET /metrics`` after real requests through the gateway."""

from __future__ import annotations

import re

import httpx
import pytest

from gateway.app import create_app
from gateway.settings import Settings
from tests.observability.conftest import chat, start_gateway, wait_row


def sample(text: str, name: str, **labels) -> float:
    """The value of one sample in Prometheus text format (0.0 when absent)."""
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        m = re.match(r"([a-zA-Z_:]+)(\{(.*)\})? (\S+)$", line)
        if not m or m.group(1) != name:
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', m.group(3) or ""))
        if all(got.get(k) == v for k, v in labels.items()):
            return float(m.group(4))
    return 0.0


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    gw = start_gateway(tmp_path_factory.mktemp("metrics"))
    yield gw
    gw.stop()


def test_requests_tokens_cost_and_latency_are_counted(gw):
    r = chat(gw, "What is 2+2?")
    assert r.status_code == 200
    backend = r.headers["x-mixroute-backend"]
    s = chat(gw, "Tell me a story", stream=True)
    assert s.status_code == 200 and "[DONE]" in s.text
    wait_row(gw.settings.database_url, "outcomes", s.headers["x-mixroute-request-id"])
    text = httpx.get(gw.url + "/metrics").text
    assert sample(text, "mixroute_requests_total", route="auto", backend=backend, status="ok") >= 1
    assert sample(text, "mixroute_decision_latency_seconds_count", route="auto") >= 2
    assert sample(text, "mixroute_ttft_seconds_count", backend=backend) >= 1
    assert sample(text, "mixroute_itl_seconds_count", backend=s.headers["x-mixroute-backend"]) >= 1
    usage = r.json()["usage"]
    assert sample(text, "mixroute_tokens_total", tenant="-", route="auto", backend=backend,
                  kind="input") >= usage["prompt_tokens"]
    assert sample(text, "mixroute_cost_usd_total", tenant="-", route="auto", backend=backend) > 0
    assert sample(text, "mixroute_pool_in_flight", pool=backend) == 0
    assert sample(text, "mixroute_pool_queue_depth", pool=backend) == 0
    assert 'mixroute_prefix_cache_hit_ratio{backend="' + backend + '"}' in text
    assert sample(text, "mixroute_store_rows_total", result="written") >= 2
    assert "mixroute_store_journal_bytes" in text
    assert sample(text, "mixroute_http_responses_total", path="/v1/chat/completions", method="POST",
                  code="200") >= 2


def test_static_files_are_labelled_by_their_mount_and_404s_as_unmatched(gw):
    """From a fresh-user pass: the dashboard's static files were counted as path="unmatched",
    the label docs/OBSERVABILITY.md keeps for requests no route matched (404s)."""
    assert httpx.get(gw.url + "/dashboard/static/dashboard.css").status_code == 200
    assert httpx.get(gw.url + "/no/such/page").status_code == 404
    text = httpx.get(gw.url + "/metrics").text
    assert sample(text, "mixroute_http_responses_total", path="/dashboard/static", method="GET", code="200") >= 1
    assert sample(text, "mixroute_http_responses_total", path="unmatched", method="GET", code="404") >= 1
    assert 'path="unmatched",method="GET",code="200"' not in text


def test_errors_are_counted_without_request_ids(gw):
    r = chat(gw, model="no-such-route")
    assert r.status_code == 404
    text = httpx.get(gw.url + "/metrics").text
    assert sample(text, "mixroute_decision_latency_seconds_count", route="error") >= 1
    assert "mr-" not in text  # no request id ever becomes a label


def test_each_app_has_its_own_registry():
    a, b = create_app(Settings(classifier="off")), create_app(Settings(classifier="off"))
    assert a.state.observability.metrics.registry is not b.state.observability.metrics.registry
    a.state.observability.metrics.requests.labels("r", "b", "ok").inc()
    assert b.state.observability.metrics.requests.labels("r", "b", "ok")._value.get() == 0


def test_grafana_dashboard_uses_only_exposed_metrics(gw):
    """Every metric the Grafana JSON queries is declared by ``/metrics``."""
    import json
    from pathlib import Path

    dash = json.loads((Path(__file__).parents[2] / "deploy/grafana/mixroute.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    exprs += [v["definition"] for v in dash["templating"]["list"] if "definition" in v]
    names = {re.sub(r"_(bucket|sum|count)$", "", n) for e in exprs for n in re.findall(r"mixroute_[a-z_]+", e)}
    text = httpx.get(gw.url + "/metrics").text
    declared = set(re.findall(r"^# TYPE (\S+) ", text, re.M))
    declared |= {n + "_total" for n in declared}
    assert names and names <= declared, names - declared


def test_refusals_are_counted_as_rejected_outcomes(tmp_path):
    """A rule's block is an outcome row with status 'rejected' (labelled with its route): the counter, which promises
    one sample per outcome row, counts it too."""
    policy = """version: 1
backends:
  - {name: b, kind: fake, model: m, quality: 0.9}
routes:
  - {name: auto, backends: [b]}
rules:
  - {name: no-danger, when_header: x-mixroute-danger, block: true}
"""
    gw = start_gateway(tmp_path, policy)
    try:
        r = httpx.post(gw.v1 + "/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]},
                       headers={"x-mixroute-danger": "1"})
        assert r.status_code == 400 and r.json()["error"]["code"] == "prompt_blocked"
        wait_row(gw.settings.database_url, "outcomes", r.headers["x-mixroute-request-id"])
        text = httpx.get(gw.url + "/metrics").text
        assert sample(text, "mixroute_requests_total", route="auto", backend="-", status="rejected") == 1
    finally:
        gw.stop()
