"""Micro-batching merges concurrent calls (no torch needed)."""

import asyncio
import threading

import pytest

from router.classify.batching import MicroBatcher


def _upper(calls: list):
    def fn(texts):
        calls.append((list(texts), threading.current_thread().name))
        return [t.upper() for t in texts]
    return fn


async def test_concurrent_calls_share_one_batch():
    calls: list = []
    b = MicroBatcher(_upper(calls), max_batch=64, max_wait_ms=20)
    out = await asyncio.gather(*[b.submit(f"p{i}") for i in range(10)])
    assert out == [f"P{i}" for i in range(10)]
    assert len(calls) == 1 and len(calls[0][0]) == 10
    assert calls[0][1].startswith("mixroute-classifier")  # off the event loop
    b.close()


async def test_max_batch_splits():
    calls: list = []
    b = MicroBatcher(_upper(calls), max_batch=4, max_wait_ms=50)
    out = await asyncio.gather(*[b.submit(str(i)) for i in range(10)])
    assert out == [str(i) for i in range(10)]
    assert sorted(len(c[0]) for c in calls) == [2, 4, 4]
    b.close()


async def test_errors_reach_every_caller_and_batcher_recovers():
    state = {"fail": True}

    def fn(texts):
        if state["fail"]:
            raise RuntimeError("boom")
        return texts

    b = MicroBatcher(fn, max_batch=8, max_wait_ms=1)
    results = await asyncio.gather(b.submit("a"), b.submit("b"), return_exceptions=True)
    assert all(isinstance(r, RuntimeError) for r in results)
    state["fail"] = False
    assert await b.submit("c") == "c"
    b.close()


async def test_cancelled_caller_does_not_break_others():
    b = MicroBatcher(lambda ts: ts, max_batch=8, max_wait_ms=20)
    t1 = asyncio.ensure_future(b.submit("x"))
    t2 = asyncio.ensure_future(b.submit("y"))
    await asyncio.sleep(0)
    t1.cancel()
    assert await t2 == "y"
    with pytest.raises(asyncio.CancelledError):
        await t1
    b.close()


async def test_on_batch_reports_latency_and_size():
    seen: list = []
    b = MicroBatcher(_upper([]), max_batch=64, max_wait_ms=10)
    b.on_batch = lambda latency_s, size: seen.append((latency_s, size))
    await asyncio.gather(*[b.submit(f"p{i}") for i in range(5)])
    assert len(seen) == 1 and seen[0][1] == 5 and seen[0][0] >= 0
    b.on_batch = lambda latency_s, size: 1 / 0  # a failing hook never fails a classification
    assert await b.submit("x") == "X"
    b.close()


async def test_gateway_feeds_classifier_metrics(tmp_path):
    pytest.importorskip("torch")
    import httpx

    from tests.gateway.conftest import start_gateway

    gw = start_gateway(tmp_path, classifier="on")
    try:
        assert httpx.post(gw.v1 + "/chat/completions",
                          json={"messages": [{"role": "user", "content": "What is 2 + 2?"}]}).status_code == 200
        text = httpx.get(gw.url + "/metrics").text
        count = [line for line in text.splitlines() if line.startswith("mixroute_classifier_batch_size_count")]
        assert count and float(count[0].split()[-1]) >= 1
        ready = httpx.get(gw.url + "/readyz").json()  # the live predictor and its resolved precision
        assert ready["predictor"] == "ClassifierPredictor"
        assert ready["classifier"]["linear"] in ("int8", "onednn", "default")
        assert ready["classifier"]["dtype"] in ("float32", "bfloat16") and "injection" in ready["classifier"]["heads"]
        from router.classify.memory import DEFAULT_K, DEFAULT_SMOOTHING

        memory = ready["classifier"]["memory"]  # the outcome memory the estimates read, and how
        assert (memory["k"], memory["task_smoothing"], memory["exclude_exact"]) == (DEFAULT_K, DEFAULT_SMOOTHING, False)
        assert memory["rows"] > 0 and len(memory["digest"]) == 16
    finally:
        gw.stop()


async def test_arrivals_during_a_running_batch_start_together_right_after_it():
    """Continuous batching: texts that arrive while the worker runs a batch are not queued
    as one small batch each (one per timer) but start as ONE batch the moment it ends."""
    import time

    calls: list = []
    release = threading.Event()

    def fn(texts):
        calls.append((list(texts), time.perf_counter()))
        if texts == ["first"]:
            release.wait(5)
        return texts

    b = MicroBatcher(fn, max_batch=64, max_wait_ms=0)
    first = asyncio.ensure_future(b.submit("first"))
    await asyncio.sleep(0.05)  # "first" is running in the worker
    later = [asyncio.ensure_future(b.submit(f"p{i}")) for i in range(5)]
    for _ in range(3):
        await asyncio.sleep(0.02)  # far longer than max_wait: no timer may start them
    assert [c[0] for c in calls] == [["first"]]
    ended = time.perf_counter()
    release.set()
    assert await first == "first" and await asyncio.gather(*later) == [f"p{i}" for i in range(5)]
    assert [c[0] for c in calls] == [["first"], [f"p{i}" for i in range(5)]]
    assert calls[1][1] - ended < 1.0
    b.close()
