"""An upstream that sends no usage is still counted and billed, and the record says the
counts are the gateway's estimate (issue: a stream without a usage chunk cost $0)."""

from __future__ import annotations

import httpx
import pytest

from backends.openai_shapes import estimate_tokens
from tests.gateway.conftest import start_gateway, wait_row

POLICY = """version: 1
backends:
  - {name: silent, kind: fake, model: silent-no-usage, quality: 0.9, pricing: {input_per_1m: 3, output_per_1m: 15}}
  - {name: talker, kind: fake, model: talker, quality: 0.9, pricing: {input_per_1m: 3, output_per_1m: 15}}
routes:
  - {name: auto, backends: [silent]}
  - {name: usage, backends: [talker]}
"""
PROMPT = "tell me about prefix caches, and why a stable system prompt makes them hit " * 3


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    gateway = start_gateway(tmp_path_factory.mktemp("usage-estimate"), POLICY, store_flush_interval_s=0.02)
    yield gateway
    gateway.stop()


def _chat(gw, model: str, stream: bool) -> tuple[str, str]:
    body = {"model": model, "messages": [{"role": "user", "content": PROMPT}], "stream": stream}
    if not stream:
        resp = httpx.post(gw.v1 + "/chat/completions", json=body, timeout=30)
        assert resp.status_code == 200, resp.text
        return resp.headers["x-mixroute-request-id"], resp.json()["choices"][0]["message"]["content"]
    text = []
    with httpx.stream("POST", gw.v1 + "/chat/completions", json=body, timeout=30) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if line.startswith("data: {"):
                import json

                for choice in json.loads(line[6:]).get("choices") or ():
                    text.append((choice.get("delta") or {}).get("content") or "")
        return resp.headers["x-mixroute-request-id"], "".join(text)


@pytest.mark.parametrize("stream", [True, False])
def test_no_usage_upstream_is_counted_billed_and_marked(gw, stream: bool) -> None:
    rid, answer = _chat(gw, "auto", stream)
    assert answer
    row = wait_row(gw.settings.database_url, "outcomes", rid)
    assert row["status"] == "ok" and row["usage_estimated"]
    assert row["tokens_in"] >= estimate_tokens(PROMPT)  # the prompt, plus the role/format overhead if any
    assert row["tokens_out"] == estimate_tokens(answer)
    assert row["cost_usd"] == pytest.approx((row["tokens_in"] * 3 + row["tokens_out"] * 15) / 1e6, rel=1e-6)
    assert row["cost_usd"] > 0


def test_upstream_usage_is_not_marked_estimated(gw) -> None:
    rid, _ = _chat(gw, "usage", True)
    row = wait_row(gw.settings.database_url, "outcomes", rid)
    assert row["usage_estimated"] is False or row["usage_estimated"] == 0
    assert row["tokens_in"] > 0 and row["cost_usd"] > 0
