"""Pool state shared by two gateway replicas through a real Redis server."""

from __future__ import annotations

import asyncio
import os
import uuid

import pytest

from backends.vllm.affinity import AffinityChooser
from backends.vllm.blocks import block_hashes
from backends.vllm.pool import Pool
from backends.vllm.shared import SharedPoolState

REDIS_URL = os.environ.get("MIXROUTE_TEST_REDIS_URL")
pytestmark = pytest.mark.skipif(not REDIS_URL, reason="MIXROUTE_TEST_REDIS_URL is not set (e.g. redis://127.0.0.1:6379/0)")
URLS = [f"http://replica-{i}:8000/v1" for i in range(4)]


async def _gateway(prefix: str) -> tuple[Pool, AffinityChooser, SharedPoolState]:
    chooser = AffinityChooser()
    pool = Pool(URLS, chooser)
    shared = SharedPoolState(REDIS_URL, prefix, "llama", uuid.uuid4().hex[:8], interval_s=0.05)
    shared.start(pool, chooser)
    return pool, chooser, shared


async def _until(pred, timeout=3.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        if pred():
            return True
        await asyncio.sleep(0.02)
    return False


async def test_in_flight_counts_reach_the_other_gateway():
    prefix = f"mrtest-{uuid.uuid4().hex[:8]}"
    (pa, _, sa), (pb, _, sb) = await _gateway(prefix), await _gateway(prefix)
    try:
        pa.replicas[2].in_flight = 5
        assert await _until(lambda: pb.replicas[2].remote_in_flight == 5)
        assert pb.replicas[2].load == 5 and pb.replicas[0].load == 0
        # The least-loaded choice on gateway B now avoids the replica that A keeps busy.
        assert pb.pick({"messages": [{"role": "user", "content": "x"}]}) is not pb.replicas[2]
        pa.replicas[2].in_flight = 0
        assert await _until(lambda: pb.replicas[2].remote_in_flight == 0)
    finally:
        await sa.aclose()
        await sb.aclose()


async def test_affinity_choice_is_learned_by_the_other_gateway():
    prefix = f"mrtest-{uuid.uuid4().hex[:8]}"
    (pa, ca, sa), (pb, cb, sb) = await _gateway(prefix), await _gateway(prefix)
    try:
        await asyncio.sleep(0.1)  # subscriptions are up
        system = "You are the support assistant of tenant 42. " * 60
        body = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": "hello"}]}
        # Gateway B has already placed other prefixes, so its own balanced choice would differ.
        for i in range(6):
            pb.pick({"messages": [{"role": "system", "content": f"other tenant {i} " * 80}]})
        chosen = pa.pick(body)
        hashes = block_hashes(body)
        assert hashes and ca.holder(hashes[-1]) == chosen.base_url
        assert await _until(lambda: cb.holder(hashes[-1]) == chosen.base_url), "B never learned A's choice"
        assert pb.pick(body) is pb.replicas[[r.base_url for r in pb.replicas].index(chosen.base_url)]
        assert cb.last_reason == "prefix_match"
    finally:
        await sa.aclose()
        await sb.aclose()


async def test_redis_down_keeps_local_choice():
    chooser = AffinityChooser()
    pool = Pool(URLS, chooser)
    shared = SharedPoolState("redis://127.0.0.1:1/0", "mrtest", "llama", "g1", interval_s=0.05)
    shared.start(pool, chooser)
    try:
        pool.replicas[0].in_flight = 2
        await asyncio.sleep(0.2)
        assert all(r.remote_in_flight == 0 for r in pool.replicas)
        assert pool.pick({"messages": [{"role": "user", "content": "y" * 400}]}) is not None
    finally:
        await shared.aclose()
