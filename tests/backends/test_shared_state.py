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
from tests.conftest import redis_test_prefix

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
    prefix = redis_test_prefix()
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
    prefix = redis_test_prefix()
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


async def test_replica_credentials_never_reach_redis():
    """Replica URLs may carry credentials; Redis, shared with other services, sees only digests."""
    import redis.asyncio as aioredis

    secret_urls = [f"http://svc:s3cret-{i}@replica-{i}:8000/v1" for i in range(2)]
    prefix = redis_test_prefix()
    spy = aioredis.Redis.from_url(REDIS_URL)
    pubsub = spy.pubsub()
    await pubsub.subscribe(f"{prefix}:pool:llama:affinity")
    gateways = []
    for _ in range(2):
        chooser = AffinityChooser()
        pool = Pool(secret_urls, chooser)
        shared = SharedPoolState(REDIS_URL, prefix, "llama", uuid.uuid4().hex[:8], interval_s=0.05)
        shared.start(pool, chooser)
        gateways.append((pool, chooser, shared))
    (pa, ca, sa), (pb, cb, sb) = gateways
    try:
        await asyncio.sleep(0.1)
        pa.replicas[1].in_flight = 3
        body = {"messages": [{"role": "system", "content": "shared system prompt " * 80}]}
        chosen = pa.pick(body)
        hashes = block_hashes(body)
        # Counts and affinity still cross between the gateways...
        assert await _until(lambda: pb.replicas[1].remote_in_flight == 3)
        assert await _until(lambda: cb.holder(hashes[-1]) == chosen.base_url)
        # ...but no key, field or message in Redis holds a URL or its password.
        seen = []
        async for key in spy.scan_iter(f"{prefix}:*"):
            seen.append(key)
            if await spy.type(key) == b"hash":
                seen.extend(k + v for k, v in (await spy.hgetall(key)).items())
        while (message := await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.2)) is not None:
            seen.append(message["data"])
        assert len(seen) >= 3
        assert not [s for s in seen if b"s3cret" in s or b"replica-" in s]
    finally:
        await sa.aclose()
        await sb.aclose()
        await pubsub.aclose()
        await spy.aclose()
