"""Fallback before the first byte, error events after it, and outcome rows that say so."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from tests.gateway.conftest import wait_row

MSG = [{"role": "user", "content": "hello fallback"}]


def _rows(gw, table: str, request_id: str) -> dict:
    return wait_row(gw.settings.database_url, table, request_id)


def test_non_streaming_falls_back_past_500_and_429(fallback_gateway):
    resp = httpx.post(fallback_gateway.v1 + "/chat/completions", json={"model": "auto", "messages": MSG})
    assert resp.status_code == 200
    assert resp.headers["x-mixroute-backend"] == "good"
    assert resp.json()["model"] == "good-model"
    rid = resp.headers["x-mixroute-request-id"]
    decision = _rows(fallback_gateway, "decisions", rid)
    assert decision["chosen"] == "broken-500" and decision["route"] == "auto"
    outcome = _rows(fallback_gateway, "outcomes", rid)
    assert outcome["backend"] == "good" and outcome["status"] == "ok"
    assert "broken-500" in str(outcome["fallbacks_taken"]) and "limited-429" in str(outcome["fallbacks_taken"])
    assert outcome["cost_usd"] == pytest.approx(float(resp.headers["x-mixroute-cost-usd"]))
    assert outcome["tokens_cache_write"] is None and outcome["tokens_cache_write_1h"] is None  # not reported


def test_streaming_falls_back_before_first_byte(fallback_gateway):
    client = openai.OpenAI(base_url=fallback_gateway.v1, api_key="x", max_retries=0)
    chunks = list(client.chat.completions.create(model="auto", messages=MSG, stream=True,
                                                 stream_options={"include_usage": True}))
    assert all(c.model == "good-model" for c in chunks)
    assert chunks[-1].usage.total_tokens > 0


def test_all_backends_fail_gives_envelope(fallback_gateway):
    resp = httpx.post(fallback_gateway.v1 + "/chat/completions", json={"model": "all-broken", "messages": MSG})
    assert resp.status_code == 429  # the last one tried answered 429
    err = resp.json()["error"]
    assert err["code"] == "upstream_rate_limited" and err["type"] == "rate_limit_error"
    outcome = _rows(fallback_gateway, "outcomes", resp.headers["x-mixroute-request-id"])
    assert outcome["status"] == "error" and outcome["cost_usd"] == 0


def test_drop_mid_stream_ends_with_error_event(fallback_gateway):
    with httpx.stream("POST", fallback_gateway.v1 + "/chat/completions",
                      json={"model": "drop", "messages": MSG, "stream": True}) as resp:
        assert resp.status_code == 200
        lines = [line for line in resp.iter_lines() if line.startswith("data: ")]
        rid = resp.headers["x-mixroute-request-id"]
    assert lines[-1] == "data: [DONE]"
    assert '"error"' in lines[-2] and "upstream_stream_error" in lines[-2]
    assert len(lines) >= 4  # some content reached the client before the break
    outcome = _rows(fallback_gateway, "outcomes", rid)
    assert outcome["status"] == "error" and outcome["error_code"] == "upstream_stream_error"
    assert outcome["streamed"]
    # The upstream generated (and bills) the prompt and the tokens sent before the break: a
    # fresh-user pass found them recorded as 0 tokens in, $0.
    assert outcome["tokens_in"] > 0 and outcome["tokens_out"] > 0 and outcome["cost_usd"] > 0


def test_client_disconnect_records_outcome(fallback_gateway):
    with httpx.stream("POST", fallback_gateway.v1 + "/chat/completions",
                      json={"model": "slow", "messages": MSG, "stream": True}) as resp:
        rid = resp.headers["x-mixroute-request-id"]
        next(resp.iter_lines())
    outcome = _rows(fallback_gateway, "outcomes", rid)
    assert outcome["status"] == "client_disconnected"
    # The backend got (and bills) the prompt: it is counted (chars/4), not recorded as 0 tokens.
    assert outcome["tokens_in"] > 0


def test_fallback_header_and_all_failed_message(fallback_gateway):
    resp = httpx.post(fallback_gateway.v1 + "/chat/completions", json={"model": "auto", "messages": MSG})
    assert resp.headers["x-mixroute-fallbacks"] == "broken-500,limited-429"
    resp = httpx.post(fallback_gateway.v1 + "/chat/completions", json={"model": "all-broken", "messages": MSG})
    msg = resp.json()["error"]["message"]
    assert "broken-500 (upstream_server_error)" in msg and "limited-429 (upstream_rate_limited)" in msg


def test_refused_request_is_recorded(tmp_path):
    """A refusal is a 4xx (the SDKs would retry a 5xx that can only repeat) whose message
    names the bar, logged with its route, signals and scored candidates; `policy what-if`
    over a log that holds it counts it rather than failing."""
    from typer.testing import CliRunner

    from gateway.cli import app as cli_app
    from tests.gateway.conftest import start_gateway

    policy = """version: 1
backends:
  - {name: weak, kind: fake, model: weak-model, quality: 0.3}
  - {name: other, kind: fake, model: other-model, quality: 0.2}
routes:
  - {name: auto, backends: [weak, other], quality_bar: {min_quality: 0.9}, on_no_candidate: reject}
  - {name: open, backends: [weak, other]}
"""
    gw = start_gateway(tmp_path, policy)
    try:
        resp = httpx.post(gw.v1 + "/chat/completions", json={"messages": MSG})
        error = resp.json()["error"]
        assert resp.status_code == 422 and error["code"] == "no_candidate" and error["type"] == "invalid_request_error"
        assert "(min_quality: 0.9; the best, 'weak', is predicted 0.300)" in error["message"], error["message"]
        rid = resp.headers["x-mixroute-request-id"]
        decision = _rows(gw, "decisions", rid)
        assert decision["reason"] == "no_candidate" and decision["route"] == "auto" and decision["chosen"] == ""
        candidates = json.loads(decision["candidates"])
        assert [(c["backend"], c["eligible"]) for c in candidates] == [("weak", False), ("other", False)]
        signals = json.loads(decision["signals"])
        assert signals["bar"] == 0.9 and "min_quality: 0.9" in signals["refused"] and signals["predictor"]
        outcome = _rows(gw, "outcomes", rid)
        assert outcome["status"] == "rejected" and outcome["http_status"] == 422
        # A dry run gets the same error, with the candidates and the bar it was refused against.
        dry = httpx.post(gw.v1 + "/route", json={"messages": MSG})
        assert dry.status_code == 422 and dry.json()["error"] == error and dry.headers["x-mixroute-request-id"]
        view = dry.json()["mixroute"]
        assert view["route"] == "auto" and view["quality_bar"] == 0.9
        assert [(c["backend"], c["predicted_quality"]) for c in view["candidates"]] == [("weak", 0.3), ("other", 0.2)]
        served = httpx.post(gw.v1 + "/chat/completions", json={"model": "open", "messages": MSG})
        assert served.status_code == 200
        _rows(gw, "outcomes", served.headers["x-mixroute-request-id"])
        result = CliRunner().invoke(cli_app, ["policy", "what-if", str(gw.settings.policy_path),
                                              "--logs", gw.settings.database_url])
        assert result.exit_code == 0, result.output
        assert "2 logged request(s)" in result.output and "1 refused when logged" in result.output, result.output
    finally:
        gw.stop()


def test_rules_that_leave_no_backend_are_a_403_logged_with_the_rules(tmp_path):
    from gateway.auth.keys import create_key
    from gateway.store.db import make_engine, upgrade
    from tests.gateway.conftest import start_gateway

    policy = """version: 1
backends:
  - {name: weak, kind: fake, model: weak-model, quality: 0.3}
  - {name: other, kind: fake, model: other-model, quality: 0.2}
routes:
  - {name: auto, backends: [weak, other]}
rules:
  - {name: acme-weak, tenants: [acme], allow_backends: [weak]}
  - {name: only-other, when_header: x-only-other, allow_backends: [other]}
"""
    engine = make_engine(f"sqlite:///{tmp_path}/mixroute.db")
    upgrade(engine)
    key, _ = create_key(engine, tenant="acme")
    engine.dispose()
    gw = start_gateway(tmp_path, policy)
    try:
        # Each rule alone leaves a backend; acme's request with the header matches both.
        resp = httpx.post(gw.v1 + "/chat/completions", json={"messages": MSG},
                          headers={"authorization": f"Bearer {key}", "x-only-other": "1"})
        error = resp.json()["error"]
        assert resp.status_code == 403 and error["code"] == "no_candidate" and error["type"] == "permission_error"
        assert "acme-weak" in error["message"] and "only-other" in error["message"]
        decision = _rows(gw, "decisions", resp.headers["x-mixroute-request-id"])
        assert decision["route"] == "auto" and decision["tenant"] == "acme"
        assert "only-other" in json.loads(decision["signals"])["refused"]
        assert httpx.post(gw.v1 + "/chat/completions", json={"messages": MSG},
                          headers={"authorization": f"Bearer {key}"}).status_code == 200
    finally:
        gw.stop()


@pytest.mark.parametrize("stream", [False, True])
def test_a_bug_in_a_backend_adapter_falls_back_and_is_recorded(fallback_gateway, stream):
    """A plain exception from a backend (a bug, not an upstream answer) is a retryable
    backend failure: the request falls back, and an outcome is recorded either way."""
    resp = httpx.post(fallback_gateway.v1 + "/chat/completions", json={"model": "bug", "messages": MSG,
                                                                       "stream": stream})
    assert resp.status_code == 200 and resp.headers["x-mixroute-backend"] == "good", resp.text
    outcome = _rows(fallback_gateway, "outcomes", resp.headers["x-mixroute-request-id"])
    assert outcome["status"] == "ok" and "buggy" in str(outcome["fallbacks_taken"])
    resp = httpx.post(fallback_gateway.v1 + "/chat/completions", json={"model": "only-bug", "messages": MSG,
                                                                       "stream": stream})
    assert resp.status_code == 502 and resp.json()["error"]["code"] == "upstream_error", resp.text
    outcome = _rows(fallback_gateway, "outcomes", resp.headers["x-mixroute-request-id"])
    assert outcome["status"] == "error"


def test_a_pinned_failure_logs_giving_up_not_falling_back(fallback_gateway, caplog):
    """A pinned request has nowhere to fall back to: the log line must not say it does."""
    import logging

    with caplog.at_level(logging.WARNING, logger="mixroute.dispatch"):
        resp = httpx.post(fallback_gateway.v1 + "/chat/completions", json={"model": "broken-500", "messages": MSG})
    assert resp.status_code == 502
    lines = [r.getMessage() for r in caplog.records if "failed before the first byte" in r.getMessage()]
    assert lines and lines[-1].endswith("giving up") and not any("falling back" in line for line in lines)


@pytest.mark.parametrize("stream", [False, True])
def test_context_length_exceeded_falls_back_to_another_candidate(fallback_gateway, stream):
    """Too long for one model is not a bad request: the next candidate (which may have a larger
    context window) answers; with no other candidate the client gets the upstream's error,
    code and param kept."""
    body = {"model": "long", "messages": MSG, "stream": stream}
    resp = httpx.post(fallback_gateway.v1 + "/chat/completions", json=body)
    assert resp.status_code == 200 and resp.headers["x-mixroute-backend"] == "good"
    assert resp.headers["x-mixroute-fallbacks"] == "short"
    alone = httpx.post(fallback_gateway.v1 + "/chat/completions", json={**body, "model": "only-short"})
    err = alone.json()["error"]
    assert alone.status_code == 400 and (err["code"], err["param"], err["type"]) == (
        "context_length_exceeded", "messages", "invalid_request_error")


@pytest.mark.parametrize("stream", [False, True])
def test_context_length_exceeded_skips_candidates_with_no_larger_window(fallback_gateway, stream):
    """After a 4096-token window rejected the prompt, another 4096-token backend would reject
    it too: it is not called. A backend whose window is unknown is still tried."""
    body = {"model": "long-skip", "messages": MSG, "stream": stream}
    resp = httpx.post(fallback_gateway.v1 + "/chat/completions", json=body)
    assert resp.status_code == 200 and resp.headers["x-mixroute-backend"] == "good"
    assert resp.headers["x-mixroute-fallbacks"] == "short"  # short-too was never called
    outcome = _rows(fallback_gateway, "outcomes", resp.headers["x-mixroute-request-id"])
    assert "short-too" not in str(outcome["fallbacks_taken"])

    resp = httpx.post(fallback_gateway.v1 + "/chat/completions", json={**body, "model": "only-shorts"})
    err = resp.json()["error"]
    assert resp.status_code == 400 and err["code"] == "context_length_exceeded" and err["param"] == "messages"
    assert "All 2 backends tried failed: short (context_length_exceeded), window-unknown" in err["message"]
    assert "short-too (not tried: its 4096-token context window is no larger than 4096)" in err["message"]


def test_a_skipped_fallback_is_not_an_attempt(fallback_gateway):
    """From a fresh-user pass: with max_attempts 3 the decision records two fallbacks
    (short-too, shorter); both are skipped after short's 4096-token window rejected the
    prompt, and the 128k-token backend beyond them answers instead of a context error."""
    body = {"model": "skips-past-max-attempts", "messages": MSG}
    route = httpx.post(fallback_gateway.v1 + "/route", json=body).json()
    assert route["chosen"] == "short" and route["fallbacks"] == ["short-too", "shorter"]
    resp = httpx.post(fallback_gateway.v1 + "/chat/completions", json=body)
    assert resp.status_code == 200, resp.text
    assert resp.headers["x-mixroute-backend"] == "big-window" and resp.headers["x-mixroute-fallbacks"] == "short"


def test_pinned_and_context_refusals_are_recorded_with_a_request_id(tmp_path):
    """From a break-it pass: a pinned request a rule forbids (403 backend_not_allowed) and a
    prompt no context window holds (400 context_length_exceeded) left no rows and no
    x-mixroute-request-id."""
    from tests.gateway.conftest import start_gateway

    policy = """version: 1
backends:
  - {name: big, kind: fake, model: big-model, quality: 0.9, context_tokens: 4000}
  - {name: small, kind: fake, model: small-model, quality: 0.5, context_tokens: 4000}
routes:
  - {name: auto, backends: [big, small]}
rules:
  - {name: cheap-only, when_header: x-cheap, route_to: small}
"""
    gw = start_gateway(tmp_path, policy)
    try:
        pinned = httpx.post(gw.v1 + "/chat/completions", json={"model": "big", "messages": MSG},
                            headers={"x-cheap": "1"})
        long = httpx.post(gw.v1 + "/chat/completions", json={"messages": [{"role": "user", "content": "word " * 30000}]})
        for resp, code, route in ((pinned, "backend_not_allowed", "big"), (long, "context_length_exceeded", "auto")):
            assert resp.json()["error"]["code"] == code
            rid = resp.headers["x-mixroute-request-id"]
            decision = _rows(gw, "decisions", rid)
            assert decision["reason"] == code and decision["route"] == route and decision["chosen"] == ""
            assert json.loads(decision["signals"])["refused"] == resp.json()["error"]["message"]
            outcome = _rows(gw, "outcomes", rid)
            assert outcome["status"] == "rejected" and outcome["http_status"] == resp.status_code
        assert bool(_rows(gw, "decisions", pinned.headers["x-mixroute-request-id"])["pinned"])
    finally:
        gw.stop()
