"""A policy reload never breaks a request in flight: editing a backend's pricing while a
long stream and a slow non-streamed call run on it once closed the old backend after a
fixed grace, cutting the stream (no ``[DONE]``) and failing the call with a 502. The old
backend now stays open until its last call ends, and is closed then."""

from __future__ import annotations

import logging
import threading
import time

import httpx
import orjson
import pytest

import gateway.runtime as runtime_module
from tests.gateway.conftest import start_gateway

PROMPT = " ".join(f"word{i}" for i in range(24))
GRACE_S = 0.3  # the drain starts long before the stream (about 3 s) ends


def _policy(kind: str, upstream, price: float) -> str:
    if kind == "fake":
        slow = "kind: fake, model: s-slow, options: {first_token_delay_s: 1.5, token_delay_s: 0.1}"
    else:
        slow = f'kind: vllm, model: m-slow, endpoints: ["{upstream.v1()}"], options: {{metrics_interval_s: 0}}'
    return f"""version: 1
backends:
  - {{name: slow, {slow}, quality: 0.9, pricing: {{input_per_1m: {price}, output_per_1m: {price}}}}}
routes:
  - {{name: auto, backends: [slow]}}
"""


def _wait_for(pred, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("kind", ["fake", "vllm"])
def test_a_pricing_edit_keeps_streams_and_calls_in_flight_alive(tmp_path, kind, upstream, monkeypatch, caplog):
    import tests.backends.fake_upstream as fake_upstream

    monkeypatch.setattr(fake_upstream, "SLOW_FIRST_TOKEN_S", 1.5)
    monkeypatch.setattr(fake_upstream, "SLOW_TOKEN_S", 0.1)
    monkeypatch.setattr(runtime_module, "DRAIN_GRACE_S", GRACE_S)
    caplog.set_level(logging.INFO, logger="mixroute.policy")
    gw = start_gateway(tmp_path, _policy(kind, upstream, 1.0), policy_watch=True)
    try:
        time.sleep(0.5)  # let the watcher start
        first_hash = httpx.get(gw.url + "/readyz").json()["policy_hash"]
        body = {"model": "slow", "messages": [{"role": "user", "content": PROMPT}]}
        events: list[str] = []
        answered: dict = {}
        started = threading.Event()

        def stream() -> None:
            with httpx.stream("POST", gw.v1 + "/chat/completions", json={**body, "stream": True},
                              timeout=60) as resp:
                for line in resp.iter_lines():
                    if line.startswith("data: "):
                        events.append(line[6:])
                        started.set()
            answered["stream_ended"] = time.monotonic()

        def call() -> None:
            answered["call"] = httpx.post(gw.v1 + "/chat/completions", json=body, timeout=60)

        threads = [threading.Thread(target=stream), threading.Thread(target=call)]
        for t in threads:
            t.start()
        assert started.wait(20), "the stream did not start"
        (tmp_path / "policy.yaml").write_text(_policy(kind, upstream, 2.0))
        assert _wait_for(lambda: httpx.get(gw.url + "/readyz").json()["policy_hash"] != first_hash)
        for t in threads:
            t.join(60)

        assert events[-1] == "[DONE]", events[-3:]
        chunks = [orjson.loads(e) for e in events[:-1]]
        assert not [c for c in chunks if "error" in c], "the stream was cut by the reload"
        text = "".join((c["choices"][0]["delta"].get("content") or "") for c in chunks if c.get("choices"))
        assert text.rstrip().endswith("word23"), text  # the whole answer arrived
        assert answered["call"].status_code == 200, answered["call"].text
        # The replaced backend is closed, once its last call has ended.
        assert _wait_for(lambda: any("closed after its last call in flight" in r.getMessage()
                                     for r in caplog.records)), [r.getMessage() for r in caplog.records]
    finally:
        gw.stop()


BUG_POLICY = """version: 1
backends:
  - {name: buggy, kind: fake, model: m-bug-mid-stream, quality: 0.9}
routes:
  - {name: auto, backends: [buggy]}
"""


def test_a_stream_that_breaks_unexpectedly_still_ends_the_doors_way(tmp_path):
    """A plain exception after the first chunk (a bug, a client closed under the call) once
    cut the connection: no error event, no terminator. Every door now ends it as it ends an
    upstream failure: chat with an error event and [DONE], Responses with response.failed."""
    gw = start_gateway(tmp_path, BUG_POLICY)
    try:
        with httpx.stream("POST", gw.v1 + "/chat/completions", timeout=30,
                          json={"messages": [{"role": "user", "content": "hi"}], "stream": True}) as resp:
            events = [line[6:] for line in resp.iter_lines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        assert orjson.loads(events[-2])["error"]["code"] == "upstream_stream_error"

        with httpx.stream("POST", gw.v1 + "/responses", timeout=30,
                          json={"input": "hi", "stream": True}) as resp:
            kinds = [line[7:] for line in resp.iter_lines() if line.startswith("event: ")]
        assert kinds[-2:] == ["error", "response.failed"], kinds
    finally:
        gw.stop()
