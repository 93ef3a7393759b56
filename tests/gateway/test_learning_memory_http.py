"""The outcome memory over HTTP: feedback moves a backend's predicted quality, and a second
gateway on the same store starts with the same memory."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.gateway.conftest import start_gateway

POLICY = """version: 1
backends:
  - {name: cheap, kind: fake, model: cheap-model, quality: 0.9, pricing: {input_per_1m: 0.1, output_per_1m: 0.1}}
  - {name: strong, kind: fake, model: strong-model, quality: 0.85, pricing: {input_per_1m: 5, output_per_1m: 10}}
routes:
  - {name: auto, backends: [cheap, strong], quality_bar: {min_quality: 0.7}}
learning: {prior_weight: 2}
"""


def _route(gw) -> dict:
    resp = httpx.post(gw.v1 + "/route", json={"messages": [{"role": "user", "content": "which model?"}]}, timeout=10)
    assert resp.status_code == 200, resp.text
    return resp.json()


def _until(gw, chosen: str, timeout: float = 10.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        got = _route(gw)
        if got["chosen"] == chosen or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


@pytest.fixture()
def tmp(tmp_path):
    return tmp_path


def test_feedback_moves_the_choice_and_a_new_replica_starts_with_it(tmp) -> None:
    first = start_gateway(tmp, POLICY, learning_refresh_s=0.1, store_flush_interval_s=0.02)
    try:
        before = _route(first)
        assert before["chosen"] == "cheap"
        cheap = next(c for c in before["candidates"] if c["backend"] == "cheap")
        assert cheap["predicted_quality"] == pytest.approx(0.9)
        assert cheap["quality_sd"] == pytest.approx((0.9 * 0.1 / 3) ** 0.5, abs=1e-6)  # prior worth 2
        rated = 0
        for i in range(10):  # each answer of cheap rated 0; the memory learns within a refresh or two
            resp = httpx.post(first.v1 + "/chat/completions",
                              json={"messages": [{"role": "user", "content": f"question {i}"}]}, timeout=30)
            assert resp.status_code == 200, resp.text
            if resp.headers["x-mixroute-backend"] != "cheap":
                break
            fb = httpx.post(first.v1 + "/feedback", json={"request_id": resp.headers["x-mixroute-request-id"],
                                                           "score": 0.0}, timeout=10)
            assert fb.status_code == 202, fb.text
            rated += 1
            time.sleep(0.15)
        after = _until(first, "strong")
        assert after["chosen"] == "strong", after
        cheap = next(c for c in after["candidates"] if c["backend"] == "cheap")
        # The Beta posterior: the prior 0.9 worth 2 observations, then `rated` zeros; 0.7 is
        # crossed after the first zero (1.8 / 3 = 0.6).
        assert 1 <= rated <= 3
        assert cheap["predicted_quality"] == pytest.approx(1.8 / (2 + rated), abs=1e-6)
        assert after["signals"]["learning"] == {"before": {"cheap": 0.9, "strong": 0.85},
                                                "observations": {"cheap": rated, "strong": 0.0}}
    finally:
        first.stop()
    # Another replica (a fresh process state) reads the memory from the shared store at start.
    second = start_gateway(tmp, POLICY, learning_refresh_s=3600)
    try:
        assert _until(second, "strong")["chosen"] == "strong"
    finally:
        second.stop()
