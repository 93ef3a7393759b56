"""The `api_base` example of docs/DEPLOY.md, served as written: a `hosted` backend whose
`api_base` is an OpenAI-compatible server (the fake upstream standing in for it) answers
through the gateway, priced by its `pricing`, with its key sent upstream."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from tests.gateway.conftest import start_gateway

DOC = Path(__file__).resolve().parents[2] / "docs" / "DEPLOY.md"


def _example() -> str:
    section = DOC.read_text().split("## Hosted backends (`kind: hosted`) and `api_base`", 1)[1]
    return re.search(r"```yaml\n(.*?)```", section, re.S).group(1)


def test_the_documented_api_base_backend_answers(tmp_path, upstream, monkeypatch):
    example = _example()
    assert "api_base: https://llm.internal.example/v1" in example
    monkeypatch.setenv("INTERNAL_LLM_KEY", "sk-internal-test")
    policy = ("version: 1\n" + example.replace("https://llm.internal.example/v1", upstream.v1())
              + "routes:\n  - {name: auto, backends: [internal-llm]}\n")
    upstream.state.reset()
    gw = start_gateway(tmp_path, policy)
    try:
        r = httpx.post(gw.v1 + "/chat/completions", json={"messages": [{"role": "user", "content": "ping"}]},
                       timeout=30)
        assert r.status_code == 200, r.text
        assert r.headers["x-mixroute-backend"] == "internal-llm"
        assert "You said: ping" in r.json()["choices"][0]["message"]["content"]
        assert float(r.headers["x-mixroute-cost-usd"]) > 0
        assert upstream.state.last_body["model"] == "acme-chat-8b"
        assert upstream.state.last_headers["authorization"] == "Bearer sk-internal-test"
    finally:
        gw.stop()
