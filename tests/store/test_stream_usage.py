"""Streams are recorded with their real usage and cost, not as $0 calls."""

from __future__ import annotations

import httpx
import pytest

from tests.gateway.conftest import start_gateway, wait_row

POLICY = """version: 1
backends:
  - {name: priced, kind: fake, model: priced-model, quality: 0.9, pricing: {input_per_1m: 3, output_per_1m: 15}}
routes:
  - {name: auto, backends: [priced]}
"""


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    gateway = start_gateway(tmp_path_factory.mktemp("stream-usage"), POLICY, store_flush_interval_s=0.02)
    yield gateway
    gateway.stop()


@pytest.mark.parametrize("include_usage", [True, False])
def test_streamed_outcome_has_tokens_and_cost(gw, include_usage: bool) -> None:
    body = {"messages": [{"role": "user", "content": "tell me about prefix caches"}], "stream": True,
            "stream_options": {"include_usage": include_usage}}
    with httpx.stream("POST", gw.v1 + "/chat/completions", json=body, timeout=30) as resp:
        assert resp.status_code == 200
        text = resp.read().decode()
        rid = resp.headers["x-mixroute-request-id"]
    assert text.rstrip().endswith("data: [DONE]")
    assert ('"usage"' in text) == include_usage  # the client sees usage only when it asked
    row = wait_row(gw.settings.database_url, "outcomes", rid)
    assert row["streamed"] and row["status"] == "ok"
    assert row["tokens_in"] > 0 and row["tokens_out"] > 0
    expected = (row["tokens_in"] * 3 + row["tokens_out"] * 15) / 1e6
    assert row["cost_usd"] == pytest.approx(expected, rel=1e-6) and row["cost_usd"] > 0
