"""The official openai SDK against the real app over HTTP (demo policy, fake backends)."""

from __future__ import annotations

import json

import openai
import pytest

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@pytest.fixture
def client(demo_gateway):
    return openai.OpenAI(base_url=demo_gateway.v1, api_key="unused", max_retries=0)


def test_non_streaming_auto(client):
    raw = client.chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "user", "content": "What is the capital of France?"}])
    resp = raw.parse()
    backend = raw.headers["x-mixroute-backend"]
    assert raw.headers["x-mixroute-route"] == "auto"
    assert raw.headers["x-mixroute-reason"] == "cheapest_above_bar"
    assert raw.headers["x-mixroute-request-id"].startswith("mr-")
    assert float(raw.headers["x-mixroute-cost-usd"]) > 0
    # The demo route's bar (90% of gpt-4o's 0.88 prior) is cleared by gpt-4o-mini, the cheapest above it.
    assert backend == "gpt-4o-mini"
    assert resp.model == "gpt-4o-mini"
    assert "capital of France" in resp.choices[0].message.content
    assert resp.usage.prompt_tokens > 0 and resp.usage.completion_tokens > 0


def test_streaming_with_usage(client):
    stream = client.chat.completions.create(
        model="auto", messages=[{"role": "user", "content": "Stream me a short answer"}], stream=True,
        stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "Stream me a short answer" in text
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0
    assert chunks[-1].usage.model_extra["cost_usd"] > 0
    assert all(c.model == "gpt-4o-mini" for c in chunks)


def test_streaming_without_usage_has_no_usage_chunk(client):
    chunks = list(client.chat.completions.create(
        model="auto", messages=[{"role": "user", "content": "hi"}], stream=True))
    assert chunks and all(c.usage is None for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_tool_call_passes_through(client):
    resp = client.chat.completions.create(
        model="auto", messages=[{"role": "user", "content": "Weather in Paris?"}], tools=[WEATHER_TOOL],
        tool_choice="auto")
    call = resp.choices[0].message.tool_calls[0]
    assert resp.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "example"}


def test_tool_call_streamed(client):
    chunks = list(client.chat.completions.create(
        model="auto", messages=[{"role": "user", "content": "Weather in Paris?"}], tools=[WEATHER_TOOL],
        stream=True))
    calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert calls[0].function.name == "get_weather"
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_pinned_backend(client):
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hello"}])
    assert raw.headers["x-mixroute-reason"] == "pinned"
    assert raw.headers["x-mixroute-backend"] == "gpt-4o"
    assert raw.parse().model == "gpt-4o"


def test_completions_endpoint(client):
    raw = client.completions.with_raw_response.create(model="auto", prompt="Say hello", max_tokens=16)
    resp = raw.parse()
    assert resp.object == "text_completion" and "Say hello" in resp.choices[0].text
    assert raw.headers["x-mixroute-backend"] == "gpt-4o-mini"


def test_completions_streaming(client):
    chunks = list(client.completions.create(model="auto", prompt="Say hello", stream=True))
    assert "Say hello" in "".join(c.choices[0].text for c in chunks if c.choices)


def test_models_lists_routes_and_demo_backends(client):
    models = {m.id: m.model_extra["mixroute"] for m in client.models.list()}
    assert models["auto"]["type"] == "route" and models["auto"]["default"] is True
    assert models["gpt-4o"]["type"] == "backend" and models["gpt-4o"]["demo"] is True
    assert "DEMO" in models["gpt-4o"]["description"]


def test_unknown_fields_and_params_accepted(client):
    resp = client.chat.completions.create(
        model="auto", messages=[{"role": "user", "content": "hi"}], temperature=0.2, seed=7, n=1, stop=["\n\n"],
        user="u-1", max_completion_tokens=50, response_format={"type": "text"},
        extra_body={"some_vendor_field": {"x": 1}})
    assert resp.choices[0].message.content


def test_route_target_through_the_gateway(tmp_path):
    """A route_target route answers like any route; /v1/route shows its share and leaves
    its window alone, chat completions move it."""
    import httpx

    from tests.gateway.conftest import start_gateway

    policy = """version: 1
backends:
  - {name: big, kind: fake, model: big-model, quality: 0.9, pricing: {input_per_1m: 10, output_per_1m: 30}}
  - {name: small, kind: fake, model: small-model, quality: 0.8, pricing: {input_per_1m: 0.1, output_per_1m: 0.1}}
routes:
  - {name: auto, backends: [big, small], quality_bar: {route_target: 0.95, window: 16}}
"""
    gw = start_gateway(tmp_path, policy)
    try:
        body = {"model": "auto", "messages": [{"role": "user", "content": "hi"}]}
        routes = [httpx.post(gw.v1 + "/route", json=body, timeout=10).json() for _ in range(5)]
        assert {r["chosen"] for r in routes} == {"big"}  # the first request alone: 0.8 < 0.95 x 0.9
        assert routes[0]["signals"]["bar_kind"] == {"route_target": 0.95}
        assert routes[0]["signals"]["route_held"] == 1.0  # nothing chosen yet: dry runs did not count
        chosen = []
        for _ in range(12):
            r = httpx.post(gw.v1 + "/chat/completions", json=body, timeout=10)
            assert r.status_code == 200
            chosen.append(r.headers["x-mixroute-backend"])
        # 0.8 / 0.9 = 0.889 per small answer: the window holds 0.95 with about half on big
        assert "small" in chosen and "big" in chosen
        after = httpx.post(gw.v1 + "/route", json=body, timeout=10).json()
        # held at the target, give or take a request of the 16 (0.0069 each): the feedback
        # corrects a surplus as well as a shortfall the draws leave
        assert abs(after["signals"]["route_held"] - 0.95) <= 0.015
    finally:
        gw.stop()


def test_route_target_counts_the_fallback_that_answered(tmp_path):
    """When the first choice fails and a fallback answers, the route's held share counts the
    fallback's predicted quality: it used to count the failed choice's, so a route whose
    strong backend was down reported its bar held while every answer came from the weak one."""
    import httpx

    from tests.gateway.conftest import start_gateway

    policy = """version: 1
backends:
  - {name: big, kind: fake, model: big-model-error-500, quality: 0.9, quality_model: big-model, pricing: {input_per_1m: 10, output_per_1m: 30}}
  - {name: small, kind: fake, model: small-model, quality: 0.8, pricing: {input_per_1m: 0.1, output_per_1m: 0.1}}
routes:
  - {name: auto, backends: [big, small], quality_bar: {route_target: 0.95, window: 16}, max_attempts: 2}
"""
    gw = start_gateway(tmp_path, policy)
    try:
        body = {"model": "auto", "messages": [{"role": "user", "content": "hi"}]}
        answered = []
        for _ in range(8):
            r = httpx.post(gw.v1 + "/chat/completions", json=body, timeout=10)
            assert r.status_code == 200, r.text
            answered.append(r.headers["x-mixroute-backend"])
        assert set(answered) == {"small"}
        held = httpx.post(gw.v1 + "/route", json=body, timeout=10).json()["signals"]["route_held"]
        assert abs(held - 0.8 / 0.9) < 1e-6, held  # every answer was small's 0.8 of the best 0.9
    finally:
        gw.stop()
