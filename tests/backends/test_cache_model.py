"""Capacity-aware prefix affinity: the gateway's model of each replica's LRU prefix cache
(backends/vllm/cachemodel.py), the capacity read from ``vllm:cache_config_info`` and the
characters-per-token learned from answers."""

from __future__ import annotations

import pytest

from backends.vllm.affinity import AffinityChooser
from backends.vllm.blocks import block_hashes
from backends.vllm.cachemodel import ReplicaCaches
from backends.vllm.metrics import cache_config, parse_prometheus, to_metrics
from backends.vllm.pool import Replica
from bench.fake_vllm import serve_replicas
from tests.backends.test_affinity import FAST, conv, vllm

VLLM_INFO = ('vllm:cache_config_info{block_size="16",cache_dtype="auto",calculate_kv_scales="False",'
             'cpu_offload_gb="0",enable_prefix_caching="True",gpu_memory_utilization="0.9",'
             'num_cpu_blocks="None",num_gpu_blocks="27694",num_gpu_blocks_override="None"} 1.0\n')


def test_cache_config_is_read_from_vllm_labels():
    text = "# TYPE vllm:cache_config_info gauge\n" + VLLM_INFO + 'vllm:num_requests_waiting{model_name="m"} 2.0\n'
    assert cache_config(text) == (27694, 16)
    m = to_metrics(parse_prometheus(text), None, cache_config(text))
    assert (m.cache_blocks, m.cache_block_size, m.cache_tokens, m.waiting) == (27694, 16, 27694 * 16, 2.0)
    assert cache_config('vllm:num_requests_waiting{model_name="m"} 2.0\n') is None
    assert cache_config(VLLM_INFO.replace('num_gpu_blocks="27694"', 'num_gpu_blocks="None"')) is None
    assert to_metrics({}).cache_tokens is None


def test_modelled_lru_evicts_tails_first_and_ranks_coldness():
    caches = ReplicaCaches(block_tokens=16)
    caches.touch("a", [1, 2, 3], capacity=4)
    caches.touch("a", [9, 8], capacity=4)  # over capacity by one: the oldest tail block (3) goes
    assert caches.depth("a", [1, 2, 3]) == 2 and caches.depth("a", [9, 8]) == 2
    assert caches.depth("a", [7, 1]) == 0  # a run of leading blocks: nothing when the first is missing
    caches.touch("b", [5], capacity=4)
    # b has free room; a is full: b first. Among full caches, the oldest LRU block first.
    assert sorted(["a", "b"], key=lambda u: caches.coldness(u, 4)) == ["b", "a"]
    caches.touch("b", [6, 7, 10, 11], capacity=4)
    assert caches.coldness("a", 4) < caches.coldness("b", 4)  # a's LRU block is older


def test_characters_per_token_are_learned_and_convert_capacity():
    caches = ReplicaCaches(block_tokens=16)
    assert caches.capacity(None) is None
    assert caches.capacity(6400) == 400  # 4 characters per token before any answer: 64-character blocks
    for _ in range(400):
        caches.observe(prompt_chars=800, prompt_tokens=100)  # this model: 8 characters per token
    assert caches.chars_per_token == pytest.approx(8.0, rel=0.01)
    assert caches.capacity(6400) == pytest.approx(800, abs=8)
    caches.observe(0, 10)
    caches.observe(10, 0)
    assert caches.chars_per_token == pytest.approx(8.0, rel=0.01)


def test_modelled_caches_place_new_prefixes_and_keep_evicted_ones_home():
    reps = [Replica(f"http://r{i}/v1") for i in range(2)]
    n = len(block_hashes(conv(0)))
    chooser = AffinityChooser(cache_blocks=int(1.5 * n))  # each replica holds about 1.5 tenants' prompts
    homes = {t: chooser.choose(reps, conv(t)).base_url for t in range(4)}
    assert chooser.capacities and len(set(homes.values())) == 2
    # Tenant 0's prompt has been pushed out of every modelled cache: it goes back to the
    # replica the table remembers (its next turns hit there again), not elsewhere.
    assert all(chooser.caches.depth(u, block_hashes(conv(0))) < n / 2 for u in chooser.capacities)
    assert chooser.choose(reps, conv(0, 2)).base_url == homes[0] and chooser.last_reason == "prefix_match"
    # A prefix still held is followed.
    assert chooser.choose(reps, conv(0, 3)).base_url == homes[0] and chooser.last_reason == "prefix_match"
    # A new prefix goes where the cache turns over slowest, even against the table's counts.
    busy = homes[0]
    cold = next(u for u in chooser.capacities if u != busy)
    chooser.owned[cold] = chooser.owned.get(busy, 0) + 1_000  # the table alone would avoid it
    assert chooser.caches.coldness(cold, chooser.capacities[cold]) < chooser.caches.coldness(busy, chooser.capacities[busy])
    assert chooser.choose(reps, conv(9)).base_url == cold and chooser.last_reason == "rendezvous"
    table = AffinityChooser(cache_model=False)
    for t in range(4):
        table.choose(reps, conv(t))
    table.owned = {u: (1_000 if u == cold else 0) for u in chooser.capacities}
    assert table.choose(reps, conv(9)).base_url != cold


def test_without_a_known_capacity_the_table_decides():
    reps = [Replica(f"http://r{i}/v1") for i in range(3)]
    chooser = AffinityChooser()  # no cache_blocks and nothing scraped
    first = chooser.choose(reps, conv(1)).base_url
    assert chooser.choose(reps, conv(1, 2)).base_url == first
    assert chooser.capacities == {} and chooser.caches.lru == {}


async def test_the_pool_learns_capacity_and_token_size_from_its_replicas():
    servers = serve_replicas(2, FAST)
    try:
        backend = vllm(servers.urls)
        await backend.start()
        await backend.scraper.scrape_all()
        chooser = backend.pool.chooser
        for turns in (1, 2):
            [c async for c in backend.stream("chat", conv(3, turns))]
        await backend.send("chat", conv(4))
        await backend.aclose()
    finally:
        servers.stop()
    assert all(r.metrics.cache_blocks == FAST.capacity_blocks for r in backend.pool.replicas)
    assert set(chooser.capacities) == set(servers.urls)
    assert chooser.caches.chars_per_token != 4.0  # moved toward the fake tokenizer's characters per token
    assert sum(len(lru) for lru in chooser.caches.lru.values()) > 0
