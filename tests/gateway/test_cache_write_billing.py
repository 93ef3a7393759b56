"""End to end: a hosted Anthropic answer that wrote a prompt-cache prefix is billed at the
write price (the 1-hour one for a client's ``"ttl": "1h"`` breakpoint) in the outcome store,
the cost header and the usage chunk, and its written tokens are recorded in the outcome
(``tokens_cache_write``, ``tokens_cache_write_1h``); the client still sees OpenAI's usage keys
only, and none of the backend's internal keys. The provider is faked at the HTTP edge
(:mod:`tests.backends.fake_anthropic`); litellm's Anthropic translation runs unchanged."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import orjson
import pytest

from backends.hosted.sdk import load_litellm
from tests.backends.fake_anthropic import create_app, tokens
from tests.backends.fake_upstream import RunningServer, UpstreamState, serve_in_thread
from tests.gateway.conftest import Gateway, start_gateway, wait_row

MODEL = "claude-sonnet-4-5"
SYSTEM = "You are the billing assistant of ACME. Answer briefly and politely. " * 80  # > 1024 tokens
ANSWER_TOKENS = 3  # the fake answers "Hello from <model>."


def _private(keys) -> set[str]:
    """Non-OpenAI ``x_`` keys: a backend's report travels beside the answer, never in it."""
    return {k for k in keys if k.startswith("x_")}


@pytest.fixture(scope="module")
def anthropic() -> Iterator[RunningServer]:
    state = UpstreamState()
    server = serve_in_thread(state, app=create_app(state))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory, anthropic) -> Iterator[Gateway]:
    policy = f"""version: 1
backends:
  - {{name: claude, kind: hosted, model: anthropic/{MODEL}, api_base: "{anthropic.url}", api_key: sk-ant-test, quality: 0.9}}
routes:
  - {{name: auto, backends: [claude]}}
"""
    gw = start_gateway(tmp_path_factory.mktemp("cache-write"), policy)
    yield gw
    gw.stop()


def _map_usd(uncached: int, read: int, written: int, out: int, written_1h: int = 0) -> float:
    """USD from litellm's bundled per-token prices, independently of the gateway's Pricing
    (``written`` 5-minute writes, ``written_1h`` 1-hour ones)."""
    e = load_litellm().model_cost[MODEL]
    return (uncached * e["input_cost_per_token"] + read * e["cache_read_input_token_cost"]
            + written * e["cache_creation_input_token_cost"]
            + written_1h * e["cache_creation_input_token_cost_above_1hr"] + out * e["output_cost_per_token"])


def _messages(system: str) -> list[dict]:
    return [{"role": "system", "content": system}, {"role": "user", "content": "hi"}]


def test_a_cache_write_is_billed_and_recorded(gateway, anthropic):
    system = "Plain. " + SYSTEM
    first = httpx.post(gateway.v1 + "/chat/completions", json={"model": "auto", "messages": _messages(system)},
                       timeout=30)
    assert first.status_code == 200, first.text
    assert anthropic.state.last_body["system"][-1]["cache_control"] == {"type": "ephemeral"}  # the gateway's hint
    usage = first.json()["usage"]
    assert "cache_creation_input_tokens" not in usage and not _private(first.json())
    prefix, rest = tokens(system), tokens("hi")
    assert usage["prompt_tokens"] == prefix + rest
    outcome = wait_row(gateway.settings.database_url, "outcomes", first.headers["x-mixroute-request-id"])
    billed = _map_usd(rest, 0, prefix, ANSWER_TOKENS)
    assert outcome["cost_usd"] == pytest.approx(billed)
    assert (outcome["tokens_cache_write"], outcome["tokens_cache_write_1h"]) == (prefix, 0)
    assert float(first.headers["x-mixroute-cost-usd"]) == pytest.approx(billed)
    assert billed > _map_usd(rest + prefix, 0, 0, ANSWER_TOKENS)  # the old, too low, figure
    metrics = httpx.get(gateway.url + "/metrics").text
    assert f'mixroute_tokens_total{{backend="claude",kind="cache_write",route="auto",tenant="-"}} ' in metrics

    second = httpx.post(gateway.v1 + "/chat/completions", json={"model": "auto", "messages": _messages(system)},
                        timeout=30)
    read = wait_row(gateway.settings.database_url, "outcomes", second.headers["x-mixroute-request-id"])
    assert read["tokens_cached"] == prefix
    assert (read["tokens_cache_write"], read["tokens_cache_write_1h"]) == (0, 0)  # Anthropic reported no write
    assert not _private(second.json())
    assert read["cost_usd"] == pytest.approx(_map_usd(rest, prefix, 0, ANSWER_TOKENS))


def test_a_streamed_cache_write_is_billed_and_recorded(gateway):
    system = "Streamed. " + SYSTEM
    body = {"model": "auto", "messages": _messages(system), "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", gateway.v1 + "/chat/completions", json=body, timeout=30) as resp:
        assert resp.status_code == 200
        rid = resp.headers["x-mixroute-request-id"]
        events = [orjson.loads(line[6:]) for line in resp.iter_lines() if line.startswith("data: {")]
    [usage] = [e["usage"] for e in events if e.get("usage")]
    billed = _map_usd(tokens("hi"), 0, tokens(system), ANSWER_TOKENS)
    assert usage["cost_usd"] == pytest.approx(billed)
    assert "cache_creation_input_tokens" not in usage and not any(_private(e) for e in events)
    outcome = wait_row(gateway.settings.database_url, "outcomes", rid)
    assert outcome["cost_usd"] == pytest.approx(billed)
    assert (outcome["tokens_cache_write"], outcome["tokens_cache_write_1h"]) == (tokens(system), 0)


def _hour_part(text: str) -> dict:
    return {"type": "text", "text": text, "cache_control": {"type": "ephemeral", "ttl": "1h"}}


@pytest.mark.parametrize("five", ["", "Five minutes. " + SYSTEM], ids=["1h-only", "1h-and-5m"])
def test_a_clients_1h_cache_write_is_billed_at_the_1h_price(gateway, anthropic, five):
    """The client marks the first system part for the 1-hour cache; with a second part the
    gateway adds its own 5-minute breakpoint after it, and both lifetimes are written."""
    hour = f"One hour ({len(five)}). " + SYSTEM
    parts = [_hour_part(hour)] + ([{"type": "text", "text": five}] if five else [])
    messages = [{"role": "system", "content": parts}, {"role": "user", "content": "hi"}]
    resp = httpx.post(gateway.v1 + "/chat/completions", json={"model": "auto", "messages": messages}, timeout=30)
    assert resp.status_code == 200, resp.text
    marks = [b.get("cache_control") for b in anthropic.state.last_body["system"]]
    assert marks == [{"type": "ephemeral", "ttl": "1h"}] + ([{"type": "ephemeral"}] if five else [])
    written, written_1h = tokens(hour + five), tokens(hour)
    billed = _map_usd(tokens("hi"), 0, written - written_1h, ANSWER_TOKENS, written_1h)
    outcome = wait_row(gateway.settings.database_url, "outcomes", resp.headers["x-mixroute-request-id"])
    assert outcome["cost_usd"] == pytest.approx(billed)
    assert (outcome["tokens_cache_write"], outcome["tokens_cache_write_1h"]) == (written, written_1h)
    assert not _private(resp.json())
    assert float(resp.headers["x-mixroute-cost-usd"]) == pytest.approx(billed)
    assert billed > _map_usd(tokens("hi"), 0, written, ANSWER_TOKENS)  # the old figure: all at the 5-minute price


def _door_request(door: str, system: str, stream: bool) -> tuple[str, dict]:
    if door == "responses":
        return "/responses", {"model": "auto", "instructions": system, "input": "hi", "stream": stream, "store": False}
    return "/messages", {"model": "auto", "max_tokens": 50, "system": system, "stream": stream,
                         "messages": [{"role": "user", "content": "hi"}]}


def _door_usage(door: str, path: str, body: dict, gateway) -> tuple[dict, str, float | None]:
    """The usage a door reported, the request id and the x-mixroute-cost-usd header."""
    if not body["stream"]:
        resp = httpx.post(gateway.v1 + path, json=body, timeout=30)
        assert resp.status_code == 200, resp.text
        return resp.json()["usage"], resp.headers["x-mixroute-request-id"], float(resp.headers["x-mixroute-cost-usd"])
    with httpx.stream("POST", gateway.v1 + path, json=body, timeout=30) as resp:
        assert resp.status_code == 200
        events = [orjson.loads(line[6:]) for line in resp.iter_lines() if line.startswith("data: {")]
        rid = resp.headers["x-mixroute-request-id"]
    last = events[-1]["response"]["usage"] if door == "responses" else events[-2]["usage"]
    return last, rid, None


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("door", ["responses", "messages"])
def test_every_door_reports_the_cache_write_and_read(gateway, door, stream):
    """Input, cache-read, cache-write and output tokens through the Responses and Messages
    doors, each in its dialect's terms, the same as the outcome row; the cost in the header
    (or, streamed, in the final usage), never in a non-streamed usage object."""
    system = f"{door} {stream}. " + SYSTEM.strip()  # no trailing space for a door to trim
    path, body = _door_request(door, system, stream)
    prefix, rest = tokens(system), tokens("hi")
    for written, read in ((prefix, 0), (0, prefix)):  # the first call writes the prefix, the second reads it
        usage, rid, header = _door_usage(door, path, body, gateway)
        outcome = wait_row(gateway.settings.database_url, "outcomes", rid)
        assert (outcome["tokens_cache_write"], outcome["tokens_cached"]) == (written, read)
        billed = _map_usd(rest, read, written, ANSWER_TOKENS)
        assert outcome["cost_usd"] == pytest.approx(billed)
        if door == "responses":  # OpenAI's input_tokens is the whole prompt; the details split it
            assert usage["input_tokens"] == prefix + rest
            assert usage["input_tokens_details"] == {"cached_tokens": read, "cache_write_tokens": written}
        else:  # Anthropic's input_tokens is what was neither read nor written
            assert (usage["input_tokens"], usage["cache_read_input_tokens"],
                    usage["cache_creation_input_tokens"]) == (rest, read, written)
        assert usage["output_tokens"] == outcome["tokens_out"] == ANSWER_TOKENS
        if stream:
            assert usage["cost_usd"] == pytest.approx(billed)
        else:
            assert "cost_usd" not in usage and header == pytest.approx(billed)
