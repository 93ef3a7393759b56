"""A session whose turn needs a stronger model, as the classifier reads it, is escalated, and
the decision row shows the switch priced both ways (over HTTP, the shipped classifier)."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.gateway.conftest import start_gateway, wait_row

pytest.importorskip("torch")
pytest.importorskip("peft")

# Backends named after models the quality head knows; the absolute bar sits between the
# weaker model's predicted quality on small talk and on a research-level proof.
POLICY = """version: 1
backends:
  - {name: strong, kind: fake, model: gpt-4-1106-preview,
     pricing: {input_per_1m: 10, output_per_1m: 30, cached_input_per_1m: 1, cache_write_input_per_1m: 12.5}}
  - {name: weak, kind: fake, model: HuggingFaceH4/zephyr-7b-beta,
     pricing: {input_per_1m: 1, output_per_1m: 3, cached_input_per_1m: 0.1}}
routes:
  - {name: auto, backends: [strong, weak], quality_bar: {min_quality: 0.5}}
"""
EASY = "hi, how are you today?"
HARD = ("Prove that there are infinitely many primes p such that p+2 is also prime, using analytic number "
        "theory and sieve bounds; give full rigorous details.")


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    gateway = start_gateway(tmp_path_factory.mktemp("escalate"), POLICY, classifier="on")
    yield gateway
    gateway.stop()


def _row(gw, resp) -> dict:
    row = wait_row(gw.settings.database_url, "decisions", resp.headers["x-mixroute-request-id"])
    for k in ("signals", "candidates"):
        if isinstance(row[k], str):
            row[k] = json.loads(row[k])
    return row


def test_a_turn_the_classifier_finds_hard_escalates_with_the_switch_priced(gw):
    sid = {"x-mixroute-session": "escalate-me"}
    messages = [{"role": "user", "content": EASY}]
    first = httpx.post(gw.v1 + "/chat/completions", json={"model": "auto", "messages": messages}, headers=sid,
                       timeout=60)
    assert first.status_code == 200, first.text
    assert first.headers["x-mixroute-backend"] == "weak"
    messages += [first.json()["choices"][0]["message"], {"role": "user", "content": HARD}]
    second = httpx.post(gw.v1 + "/chat/completions", json={"model": "auto", "messages": messages}, headers=sid,
                        timeout=60)
    assert second.status_code == 200, second.text
    assert second.headers["x-mixroute-backend"] == "strong"
    row = _row(gw, second)
    assert row["reason"] == "session_escalated" and row["chosen"] == "strong"
    weak = next(c for c in row["candidates"] if c["backend"] == "weak")
    assert weak["predicted_quality"] < 0.5 <= next(c for c in row["candidates"]
                                                   if c["backend"] == "strong")["predicted_quality"]
    session = row["signals"]["session"]
    assert session["id"] == "escalate-me" and session["turn"] == 2 and session["on"] == "weak"
    switch = session["switch"]
    assert switch["verdict"] == "escalate" and switch["on"] == "weak" and switch["move_to"] == "strong"
    # Both sides of the price: staying reads the weak model's cache, moving prefills it all on
    # the strong one (move_usd), later turns there would read it warm (move_warm_usd).
    assert switch["stay_usd"] == pytest.approx(weak["expected_cost_usd"])
    assert switch["move_usd"] > switch["move_warm_usd"] > 0 and switch["stay_usd"] > 0
    assert weak["expected_cached_tokens"] > 0
