"""End to end: under a rule with ``max_cost_mode: hard`` the gateway sends each backend the
output-token limit that keeps the call within ``max_cost_usd`` (in the field the client
used), so a long answer is cut (``finish_reason: length``) and billed within the limit."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import orjson
import pytest

from tests.backends.fake_upstream import RunningServer
from tests.gateway.conftest import Gateway, start_gateway, wait_row

LIMIT = 0.0035  # USD: 3 output tokens at 1,000 USD per 1M, the prompts being free
CAP = 3


@pytest.fixture(scope="module")
def gateway(tmp_path_factory, upstream: RunningServer) -> Iterator[Gateway]:
    policy = f"""version: 1
default_route: fake
backends:
  - {{name: pricey, kind: fake, model: pricey, quality: 0.9, pricing: {{input_per_1m: 0, output_per_1m: 1000}}}}
  - {{name: pool, kind: vllm, model: m, endpoints: ["{upstream.v1()}"], options: {{metrics_interval_s: 0}},
     pricing: {{input_per_1m: 0, output_per_1m: 1000}}}}
routes:
  - {{name: fake, backends: [pricey]}}
  - {{name: pooled, backends: [pool]}}
  - {{name: open, backends: [pricey]}}
rules:
  - {{name: cost-ceiling, routes: [fake, pooled], max_cost_usd: {LIMIT}, max_cost_mode: hard}}
"""
    gw = start_gateway(tmp_path_factory.mktemp("hard-cost"), policy)
    yield gw
    gw.stop()


def _chat(route: str, **extra) -> dict:
    return {"model": route, "messages": [{"role": "user", "content": "Tell me everything about the history of Rome."}],
            **extra}


def test_a_long_answer_is_cut_and_billed_within_the_limit(gateway):
    free = httpx.post(gateway.v1 + "/chat/completions", json=_chat("open"), timeout=30)
    assert free.status_code == 200 and free.json()["usage"]["completion_tokens"] > CAP  # uncapped, it runs longer
    resp = httpx.post(gateway.v1 + "/chat/completions", json=_chat("fake", max_tokens=500), timeout=30)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == CAP
    assert float(resp.headers["x-mixroute-cost-usd"]) <= LIMIT
    outcome = wait_row(gateway.settings.database_url, "outcomes", resp.headers["x-mixroute-request-id"])
    assert outcome["cost_usd"] <= LIMIT and outcome["tokens_out"] == CAP


@pytest.mark.parametrize("extra, field", [
    ({}, "max_tokens"),
    ({"max_tokens": 500}, "max_tokens"),
    ({"max_completion_tokens": 500}, "max_completion_tokens"),
    ({"max_tokens": 2}, None),  # the client's own limit is within the cost limit: unchanged
    ({"max_tokens": 500, "max_completion_tokens": 400}, "both"),
    # backends read max_completion_tokens (500): capped; the smaller max_tokens is not raised
    ({"max_tokens": 2, "max_completion_tokens": 500}, "each lowered"),
])
def test_the_backend_receives_the_limit_in_the_clients_field(gateway, upstream, extra, field):
    upstream.state.reset()
    resp = httpx.post(gateway.v1 + "/chat/completions", json=_chat("pooled", **extra), timeout=30)
    assert resp.status_code == 200, resp.text
    sent = upstream.state.last_body
    if field is None:
        assert sent["max_tokens"] == 2 and "max_completion_tokens" not in sent
    elif field == "each lowered":
        assert (sent["max_tokens"], sent["max_completion_tokens"]) == (2, CAP)
    elif field == "both":
        assert sent["max_tokens"] == sent["max_completion_tokens"] == CAP
    else:
        assert sent[field] == CAP
        assert {"max_tokens", "max_completion_tokens"} & sent.keys() == {field}


def test_a_stream_is_capped_too(gateway, upstream):
    upstream.state.reset()
    with httpx.stream("POST", gateway.v1 + "/chat/completions", json=_chat("pooled", stream=True), timeout=30) as resp:
        assert resp.status_code == 200
        events = [orjson.loads(line[6:]) for line in resp.iter_lines() if line.startswith("data: {")]
    assert events and upstream.state.last_body["max_tokens"] == CAP


def test_a_prompt_over_the_limit_gets_a_clear_error(gateway):
    policy_limit = httpx.post(gateway.v1 + "/chat/completions",
                              json={"model": "pricey", "messages": [{"role": "user", "content": "hi"}],
                                    "n": 4, "max_tokens": 500}, timeout=30)
    # four completions share the 3 tokens the limit buys: none can have one
    assert policy_limit.status_code == 403, policy_limit.text
    err = policy_limit.json()["error"]
    assert err["code"] == "backend_not_allowed" and "hard limit of 0.0035 USD" in err["message"]
