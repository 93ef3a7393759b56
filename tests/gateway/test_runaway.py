"""Runaway cost on a real gateway: a tenant's spend rate driven past ten times its own
baseline fires the check (a log line, /metrics, the dashboard's events); under ``throttle``
that tenant's requests are admitted at the stated rate only, while another tenant is
untouched; under ``alert`` nobody is refused."""

from __future__ import annotations

import logging
import time

import httpx
import pytest

from tests.gateway.conftest import start_gateway

ADMIN = "admin-secret-runaway"
# Input tokens are all that is priced, so a prompt ten times as long costs ten times as much.
POLICY = """version: 1
backends:
  - {{name: priced, kind: fake, model: priced-model, quality: 0.9, pricing: {{input_per_1m: 50, output_per_1m: 0}}}}
routes:
  - {{name: auto, backends: [priced]}}
runaway: {{action: {action}, {extra}scopes: [tenant], window_s: 2, baseline_windows: 4, warmup_windows: 3,
           factor: 4, min_usd_per_min: 0, hold_s: 120}}
"""
THROTTLE_RPM = 3
SHORT = "calm words " * 20
LONG = "calm words " * 260


def _gateway(tmp, action: str):
    extra = f"throttle_rpm: {THROTTLE_RPM}, " if action == "throttle" else ""
    return start_gateway(tmp, POLICY.format(action=action, extra=extra), admin_key=ADMIN)


def _key(gw, tenant: str) -> str:
    r = httpx.post(gw.v1 + "/admin/keys", json={"tenant": tenant}, headers={"authorization": f"Bearer {ADMIN}"},
                   timeout=30)
    assert r.status_code == 201, r.text
    return r.json()["key"]


def _ask(gw, key: str, text: str) -> httpx.Response:
    return httpx.post(gw.v1 + "/chat/completions", json={"messages": [{"role": "user", "content": text}]},
                      headers={"authorization": f"Bearer {key}"}, timeout=30)


def _active(gw, tenant: str) -> bool:
    from prometheus_client.parser import text_string_to_metric_families

    for fam in text_string_to_metric_families(httpx.get(gw.url + "/metrics", timeout=30).text):
        for s in fam.samples:
            if s.name == "mixroute_runaway_active" and s.labels == {"scope": "tenant", "name": tenant}:
                return s.value == 1
    return False


def _drive_to_runaway(gw, wild: str, calm: str) -> list[httpx.Response]:
    """Both tenants at one short request per 0.4 s for three windows (the baseline), then the
    wild tenant's prompts grow tenfold at the same pace until the check fires."""
    for _ in range(15):
        assert _ask(gw, wild, SHORT).status_code == 200
        assert _ask(gw, calm, SHORT).status_code == 200
        time.sleep(0.4)
    assert not _active(gw, "wild")
    during = []
    deadline = time.monotonic() + 20
    while not _active(gw, "wild"):
        assert time.monotonic() < deadline, "the runaway check never fired"
        during.append(_ask(gw, wild, LONG))
        assert _ask(gw, calm, SHORT).status_code == 200
        time.sleep(0.4)
    return during


@pytest.mark.parametrize("action", ["alert", "throttle"])
def test_ten_times_the_baseline_fires(tmp_path, caplog, action):
    gw = _gateway(tmp_path, action)
    try:
        wild, calm = _key(gw, "wild"), _key(gw, "calm")
        with caplog.at_level(logging.WARNING, logger="mixroute.runaway"):
            _drive_to_runaway(gw, wild, calm)
        assert any("runaway spend: tenant 'wild'" in r.getMessage() for r in caplog.records), caplog.text
        assert not _active(gw, "calm")
        dash = httpx.get(gw.url + "/dashboard/api/summary", headers={"authorization": f"Bearer {ADMIN}"},
                         timeout=30).json()
        (event,) = [e for e in dash["runaway"] if e["name"] == "wild"]
        assert event["action"] == action and event["scope"] == "tenant"
        assert event["rate_usd_per_min"] > 4 * event["baseline_usd_per_min"] > 0

        after = [_ask(gw, wild, LONG) for _ in range(10)]
        others = [_ask(gw, calm, SHORT) for _ in range(10)]
        assert all(r.status_code == 200 for r in others), [r.text for r in others if r.status_code != 200]
        if action == "alert":
            assert all(r.status_code == 200 for r in after)
            return
        admitted = [r for r in after if r.status_code == 200]
        refused = [r for r in after if r.status_code != 200]
        # At most the stated rate per minute (twice that if the minute turned during the burst).
        assert len(admitted) <= 2 * THROTTLE_RPM and len(refused) >= 10 - 2 * THROTTLE_RPM
        for r in refused:
            assert r.status_code == 429 and r.json()["error"]["code"] == "spend_rate_throttled", r.text
            assert int(r.headers["retry-after"]) >= 1
        metrics = httpx.get(gw.url + "/metrics", timeout=30).text
        assert 'mixroute_rejections_total{reason="spend_rate_throttled",tenant="wild"}' in metrics
        assert not [line for line in metrics.splitlines()
                    if line.startswith("mixroute_rejections_total{") and 'tenant="calm"' in line]
    finally:
        gw.stop()
