"""Exploration through the real gateway: it stays within rules and cost limits, and every
decision row records the probability its choice was made with."""

from __future__ import annotations

import time
from math import sqrt

import httpx
import pytest
import sqlalchemy as sa

from tests.gateway.conftest import start_gateway

POLICY = """version: 1
backends:
  - {name: cheap, kind: fake, model: cheap-model, quality: 0.9, pricing: {input_per_1m: 0.1, output_per_1m: 0.1}}
  - {name: mid, kind: fake, model: mid-model, quality: 0.6, pricing: {input_per_1m: 1, output_per_1m: 1}}
  - {name: banned, kind: fake, model: banned-model, quality: 0.5, pricing: {input_per_1m: 0.01, output_per_1m: 0.01}}
  - {name: pricey, kind: fake, model: pricey-model, quality: 0.95, pricing: {input_per_1m: 1000, output_per_1m: 1000}}
routes:
  - {name: auto, backends: [cheap, mid, banned, pricey], quality_bar: {min_quality: 0.5}}
rules:
  - {name: allow-list, allow_backends: [cheap, mid, pricey]}
  - {name: cap, max_cost_usd: 0.001}
learning: {explore: 0.5}
"""


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    gateway = start_gateway(tmp_path_factory.mktemp("explore"), POLICY, store_flush_interval_s=0.02)
    yield gateway
    gateway.stop()


def test_explores_within_the_rules_and_records_propensities(gw) -> None:
    ids = []
    for i in range(40):
        resp = httpx.post(gw.v1 + "/chat/completions",
                          json={"messages": [{"role": "user", "content": f"explore {i}"}]}, timeout=30)
        assert resp.status_code == 200, resp.text
        assert resp.headers["x-mixroute-backend"] in ("cheap", "mid")  # never banned, never over the cap
        ids.append(resp.headers["x-mixroute-request-id"])
    engine = sa.create_engine(gw.settings.database_url)
    rows = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT chosen, reason, probability FROM decisions")).all()
        if len(rows) >= 40:
            break
        time.sleep(0.05)
    engine.dispose()
    assert len(rows) == 40
    # Both estimates are policy priors worth 2 observations: u is proportional to their sd.
    sd = {"cheap": sqrt(0.9 * 0.1 / 3), "mid": sqrt(0.6 * 0.4 / 3)}
    u = {k: v / sum(sd.values()) for k, v in sd.items()}
    chosen = {row[0] for row in rows}
    assert chosen == {"cheap", "mid"}
    for backend, reason, probability in rows:
        if backend == "mid":
            assert reason == "explore" and probability == pytest.approx(0.5 * u["mid"], abs=1e-6)
        else:
            assert reason == "cheapest_above_bar" and probability == pytest.approx(0.5 + 0.5 * u["cheap"], abs=1e-6)


def test_a_dry_run_never_explores(gw) -> None:
    for _ in range(10):
        got = httpx.post(gw.v1 + "/route", json={"messages": [{"role": "user", "content": "dry"}]}, timeout=10).json()
        assert (got["chosen"], got["probability"]) == ("cheap", 1.0)
