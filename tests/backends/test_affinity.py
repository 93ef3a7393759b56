"""Prefix affinity, replica metrics and health of the vLLM pool (fast: fake replicas with
no modelled delays)."""

from __future__ import annotations

import pytest

from backends.call import CallContext, CallReport
from backends.config import BackendConfig
from backends.vllm.affinity import AffinityChooser
from backends.vllm.backend import VllmBackend
from backends.vllm.blocks import block_hashes
from backends.vllm.metrics import metrics_url, parse_prometheus, to_metrics
from backends.vllm.pool import Pool, Replica
from bench.fake_vllm import ReplicaModel, serve_replicas

FAST = ReplicaModel(prefill_base_s=0.0, prefill_s_per_token=0.0, itl_s=0.0, output_tokens=3, capacity_blocks=512)


def conv(tenant: int, turns: int = 1) -> dict:
    system = f"You are the helper of tenant {tenant}. " + " ".join(f"rule{tenant}-{i}" for i in range(120))
    msgs = [{"role": "system", "content": system}]
    for t in range(turns):
        msgs += [{"role": "user", "content": f"question {t} " * 10}, {"role": "assistant", "content": "answer"}]
    return {"model": "m", "messages": msgs[:-1]}


def replicas(n: int = 4) -> list[Replica]:
    return [Replica(f"http://r{i}/v1") for i in range(n)]


def test_block_hashes_share_a_prefix_and_skip_partial_blocks():
    a, b = block_hashes(conv(1, 1)), block_hashes(conv(1, 3))
    assert a and a == b[: len(a)]
    assert block_hashes({"messages": [{"role": "user", "content": "hi"}]}) == []


def test_same_prefix_same_replica_and_new_prefixes_spread():
    chooser, reps = AffinityChooser(), replicas()
    first = {t: chooser.choose(reps, conv(t)).base_url for t in range(8)}
    assert len(set(first.values())) == 4  # new prefixes are balanced over the pool
    for t in range(8):
        for turns in (2, 3):
            assert chooser.choose(reps, conv(t, turns)).base_url == first[t]
    assert chooser.reasons["prefix_match"] == 16


def test_short_prompts_fall_back_to_least_loaded():
    chooser, reps = AffinityChooser(), replicas(2)
    short = {"messages": [{"role": "user", "content": "hi"}]}
    assert [chooser.choose(reps, short).base_url for _ in range(4)] == ["http://r0/v1", "http://r1/v1"] * 2


def test_overloaded_preferred_replica_spills_to_least_loaded():
    chooser, reps = AffinityChooser(min_bound=2, load_factor=1.0), replicas(3)
    home = chooser.choose(reps, conv(5))
    home.in_flight = 5
    other = chooser.choose(reps, conv(5, 2))
    assert other is not home and chooser.last_reason in ("rendezvous", "overloaded_least_loaded")
    home.in_flight = 0
    home.metrics.waiting = 50  # scraped queue above the threshold
    assert chooser.choose(reps, conv(5, 3)) is not home


def test_a_few_requests_in_flight_do_not_spill_a_prefix():
    # Continuous batching serves several sequences at once: at 5 in flight on the holder and
    # nothing elsewhere, re-computing a whole prefix on an idle replica costs more than
    # joining the batch (the default min_bound is 8; with 4 the benchmark with pauses
    # between turns spilled ~10% of prompt tokens, docs/PREFIX_CACHE.md section 5).
    chooser, reps = AffinityChooser(), replicas(4)
    home = chooser.choose(reps, conv(3))
    home.in_flight = 5
    assert chooser.choose(reps, conv(3, 2)) is home and chooser.last_reason == "prefix_match"
    home.in_flight = 8
    assert chooser.choose(reps, conv(3, 3)) is not home


def test_spill_goes_to_the_next_replica_that_holds_the_prefix():
    chooser, reps = AffinityChooser(min_bound=1, load_factor=1.0), replicas(4)
    home = chooser.choose(reps, conv(7))
    home.in_flight = 3
    spill = chooser.choose(reps, conv(7, 2))  # overloaded home: the prefix now lives on two replicas
    assert spill is not home
    home.in_flight, spill.in_flight = 0, 3
    assert chooser.choose(reps, conv(7, 3)) is home  # back to the other holder, not a third replica
    assert chooser.last_reason == "prefix_match"
    one = AffinityChooser(min_bound=1, load_factor=1.0, holders=1)
    home = one.choose(reps, conv(7))
    home.in_flight = 3
    spill = one.choose(reps, conv(7, 2))
    home.in_flight, spill.in_flight = 0, 3
    one.choose(reps, conv(7, 3))
    assert one.last_reason == "rendezvous"  # one holder per block: home was forgotten
    assert one.owned[home.base_url] + one.owned[spill.base_url] == len(one.table)


def test_short_shared_preamble_does_not_pull_new_prompts():
    chooser, reps = AffinityChooser(), replicas()
    preamble = "Current time: [timestamp-1]. Request id: [request-id-1]. " * 2

    def body(t: int) -> dict:
        b = conv(t)
        b["messages"][0]["content"] = preamble + b["messages"][0]["content"]
        return b

    picks = {chooser.choose(reps, body(t)).base_url for t in range(4)}
    assert len(picks) == 4


METRICS = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_waiting{engine="0",model_name="m"} 2.0
vllm:num_requests_waiting{engine="1",model_name="m"} 1.0
vllm:gpu_cache_usage_perc{model_name="m"} 0.25
vllm:prefix_cache_queries_total{model_name="m"} 1000.0
vllm:prefix_cache_hits_total{model_name="m"} 750.0
vllm:time_to_first_token_seconds_sum{model_name="m"} 4.0
vllm:time_to_first_token_seconds_count{model_name="m"} 10.0
garbage line
"""


def test_parse_vllm_metrics_including_older_names():
    m = to_metrics(parse_prometheus(METRICS))
    assert (m.running, m.waiting, m.kv_cache_usage) == (3.0, 3.0, 0.25)
    assert m.prefix_hit_rate == 0.75
    later = to_metrics(parse_prometheus(METRICS.replace("sum{model_name=\"m\"} 4.0", "sum{model_name=\"m\"} 5.0")
                                        .replace("count{model_name=\"m\"} 10.0", "count{model_name=\"m\"} 12.0")), m)
    assert later.recent_ttft_s == pytest.approx(0.5)
    assert metrics_url("http://h:8000/v1") == "http://h:8000/metrics"


def test_values_no_vllm_reports_are_left_out():
    """A broken exporter's numbers (negative counts, usage above 1, more hits than queries,
    NaN) count as not reported: the chooser would take a queue of -4 as room to spare."""
    bad = to_metrics({"vllm:num_requests_running": -4.0, "vllm:num_requests_waiting": float("nan"),
                      "vllm:kv_cache_usage_perc": 7.5, "vllm:prefix_cache_queries_total": 10.0,
                      "vllm:prefix_cache_hits_total": 50.0})
    assert (bad.running, bad.waiting, bad.kv_cache_usage, bad.prefix_hit_rate) == (None, None, None, None)
    good = to_metrics({"vllm:num_requests_waiting": 0.0, "vllm:kv_cache_usage_perc": 1.0})
    assert (good.waiting, good.kv_cache_usage) == (0.0, 1.0)


def test_ejection_after_consecutive_failures_and_back_in():
    pool = Pool(["http://a/v1", "http://b/v1"], eject_after=3)
    a, b = pool.replicas
    for _ in range(2):
        pool.failed(a)
    assert a.healthy
    pool.failed(a)
    assert not a.healthy
    assert {pool.pick({}).base_url for _ in range(4)} == {"http://b/v1"}
    pool.failed(b), pool.failed(b), pool.failed(b)
    assert pool.pick({}) is not None  # all ejected: fail open
    pool.succeeded(a)
    assert a.healthy and a.failures == 0


def test_an_ejected_replica_is_retried_after_a_while(monkeypatch):
    """Without scraping, requests try an ejected replica again after ``retry_ejected_s``;
    one more failure ejects it for as long again."""
    import backends.vllm.pool as pool_module

    now = [1000.0]
    monkeypatch.setattr(pool_module.time, "monotonic", lambda: now[0])
    pool = Pool(["http://a/v1", "http://b/v1"], eject_after=2, retry_ejected_s=10)
    a, b = pool.replicas
    pool.failed(a), pool.failed(a)
    assert not a.healthy and {pool.pick({}).base_url for _ in range(4)} == {"http://b/v1"}
    now[0] += 9.9
    assert {pool.pick({}).base_url for _ in range(4)} == {"http://b/v1"}
    now[0] += 0.2
    assert "http://a/v1" in {pool.pick({}).base_url for _ in range(4)}
    pool.failed(a)  # the retry failed: out for another 10 s
    assert {pool.pick({}).base_url for _ in range(4)} == {"http://b/v1"}
    now[0] += 10.1
    assert "http://a/v1" in {pool.pick({}).base_url for _ in range(4)}
    pool.succeeded(a)
    assert a.healthy and a.failures == 0


def test_ejection_and_return_are_logged_once(caplog):
    import logging

    caplog.set_level(logging.WARNING, logger="mixroute.pool")
    pool = Pool(["http://a/v1", "http://b/v1"], eject_after=2)
    a, _ = pool.replicas
    for _ in range(4):
        pool.failed(a)
    pool.succeeded(a), pool.succeeded(a)
    assert [r.getMessage() for r in caplog.records] == [
        "replica http://a/v1 ejected after 2 failures in a row (requests)", "replica http://a/v1 is back (a request succeeded)"]


def test_good_scrapes_do_not_return_a_replica_whose_requests_fail():
    """From a fresh-user pass: a replica hanging on inference but serving /metrics was put
    back by every scrape, so requests kept timing out on it (22 of 120 got 504)."""
    pool = Pool(["http://a/v1", "http://b/v1"], eject_after=2)
    a, _ = pool.replicas
    pool.failed(a), pool.failed(a)  # two requests timed out
    pool.succeeded(a, request=False)  # ... while /metrics still answers
    assert not a.healthy and a.failures == 2
    assert {pool.pick({}).base_url for _ in range(4)} == {"http://b/v1"}
    pool.succeeded(a)  # a request that got through (retry_ejected_s) answered
    assert a.healthy and a.failures == 0
    pool.failed(a, request=False), pool.failed(a, request=False)  # down: scrapes fail
    assert not a.healthy
    pool.succeeded(a, request=False)  # back up: a good scrape returns it
    assert a.healthy


@pytest.fixture(scope="module")
def fakes():
    servers = serve_replicas(3, FAST)
    yield servers
    servers.stop()


def vllm(urls: list[str], **options) -> VllmBackend:
    return VllmBackend(BackendConfig(name="pool", kind="vllm", model="m", endpoints=urls, timeout_s=10,
                                     connect_timeout_s=1, options={"metrics_interval_s": 0.05, **options}))


async def test_conversation_sticks_to_one_replica_and_hits_its_cache(fakes):
    fakes.reset()
    backend = vllm(fakes.urls)
    await backend.start()
    usages = []
    for turns in (1, 2, 3):
        chunks = [c async for c in backend.stream("chat", conv(7, turns))]
        usages.append(chunks[-1]["usage"])
    out = await backend.send("chat", conv(7, 4))
    usages.append(out["usage"])
    await backend.scraper.scrape_all()
    await backend.aclose()
    assert [r.state.requests for r in fakes.replicas].count(0) == 2  # one replica served all four
    assert usages[0]["prompt_tokens_details"]["cached_tokens"] == 0
    assert all(u["prompt_tokens_details"]["cached_tokens"] > 0.8 * u["prompt_tokens"] for u in usages[1:])
    scraped = [r.metrics for r in backend.pool.replicas if r.metrics.prefix_cache_queries]
    assert len(scraped) == 1 and scraped[0].prefix_cache_hits > 0


async def test_dead_replica_is_ejected_by_the_scraper_and_avoided(fakes):
    import asyncio

    from tests.backends.test_vllm import dead_url

    backend = vllm([dead_url(), *fakes.urls[:2]], eject_after=2)
    await backend.start()
    for _ in range(100):
        if not backend.pool.replicas[0].healthy:
            break
        await asyncio.sleep(0.02)
    assert not backend.pool.replicas[0].healthy and all(r.healthy for r in backend.pool.replicas[1:])
    for t in range(6):
        assert (await backend.send("chat", conv(t)))["usage"]
    await backend.aclose()


async def test_the_call_context_is_not_sent_upstream(upstream, upstream_state):
    backend = vllm([upstream.v1("r1")], metrics_interval_s=0)
    report = CallReport()
    context = CallContext(tenant="t", prefix_hash="h", session_id="s", request_id="mr-1")
    await backend.send("chat", conv(1), context=context, report=report)
    await backend.aclose()
    assert upstream_state.last_body == {**conv(1), "stream": False}
    assert report.replica == upstream.v1("r1")


def test_options_are_typed():
    with pytest.raises(ValueError):
        vllm(["http://x/v1"], affinty=True)
    assert vllm(["http://x/v1"], affinity=False).pool.chooser.__class__.__name__ == "LeastLoadedChooser"


def chooser_state(c: AffinityChooser) -> tuple:
    """Everything a choice learns or counts, to check that a preview changes none of it."""
    return (list(c.table.items()), dict(c.owned), dict(c.reasons), c.last_reason, dict(c.capacities),
            {u: list(lru.items()) for u, lru in c.caches.lru.items()}, c.caches.tick, c.fallback._cursor)


@pytest.mark.parametrize("options", [{}, {"cache_blocks": 64}], ids=["table", "capacity-aware"])
def test_preview_names_the_next_choice_and_changes_nothing(options):
    chooser, reps = AffinityChooser(min_bound=2, load_factor=1.0, **options), replicas(3)
    shared = []
    chooser.on_choice = lambda hashes, url: shared.append(url)
    for t in range(3):
        chooser.choose(reps, conv(t))
    home = chooser.choose(reps, conv(1, 2))
    short = {"messages": [{"role": "user", "content": "hi"}]}
    cases = [(conv(1, 3), "prefix_match"), (conv(9), "rendezvous"), (short, "short_prompt"),
             (conv(1, 4), "overloaded_least_loaded")]
    for body, expected in cases:
        if expected == "overloaded_least_loaded":
            for r in reps:
                r.metrics.waiting = 50  # every scraped queue above the threshold
        before, calls = chooser_state(chooser), len(shared)
        replica, reason = chooser.preview(reps, body)
        assert chooser_state(chooser) == before and len(shared) == calls
        assert chooser.preview(reps, body) == (replica, reason)  # nothing moved between two previews
        assert reason == expected and (reason != "prefix_match" or replica is home)
        assert chooser.choose(reps, body) is replica and chooser.last_reason == reason


def test_pool_preview_skips_ejected_replicas_and_least_loaded_keeps_its_cursor():
    pool = Pool(["http://a/v1", "http://b/v1", "http://c/v1"], eject_after=1)
    a, b, c = pool.replicas
    pool.failed(a)
    assert pool.preview({}) == (b, "least_loaded")
    assert pool.preview({}) == (b, "least_loaded")  # the round-robin cursor did not move
    assert pool.pick({}) is b and pool.preview({}) == (c, "least_loaded")
    affinity = Pool([r.base_url for r in pool.replicas], AffinityChooser(), eject_after=1)
    affinity.failed(affinity.replicas[0])
    for t in range(6):
        assert affinity.preview(conv(t))[0] is not affinity.replicas[0]


@pytest.mark.parametrize("chooser", [None, AffinityChooser()], ids=["least_loaded", "affinity"])
def test_pool_preview_says_when_the_replica_it_names_is_ejected(chooser, monkeypatch):
    """From a break-it pass: with every replica ejected, ``/v1/route`` still said
    ``rendezvous`` or ``short_prompt``. Real dispatch fails open (the chooser picks among all
    of them), and once ``retry_ejected_s`` have passed lets a request retry one."""
    import backends.vllm.pool as pool_module

    now = [1000.0]
    monkeypatch.setattr(pool_module.time, "monotonic", lambda: now[0])
    pool = Pool(["http://a/v1", "http://b/v1", "http://c/v1"], chooser, eject_after=1, retry_ejected_s=10)
    for r in pool.replicas:
        pool.failed(r)
    short = {"messages": [{"role": "user", "content": "hi"}]}
    for body in (conv(3), short):
        replica, reason = pool.preview(body)
        assert reason == "all_ejected" and pool.pick(body) is replica
    now[0] += 10.1
    a = pool.replicas[0]
    for r in pool.replicas[1:]:
        pool.failed(r)  # their retries failed: out for another 10 s; only a is due for a retry
    assert pool.preview(conv(3)) == (a, "retry_ejected") and pool.pick(conv(3)) is a
    pool.succeeded(a)
    replica, reason = pool.preview(conv(3))
    assert replica is a and reason in ("least_loaded", "prefix_match")  # the chooser's own reason again


def test_ejection_logs_and_replica_labels_leave_out_credentials(caplog):
    import logging

    caplog.set_level(logging.WARNING, logger="mixroute.pool")
    pool = Pool(["http://vllm:s3cret@A:8000/v1/"], eject_after=1)
    [a] = pool.replicas
    pool.failed(a), pool.succeeded(a)
    assert [r.getMessage() for r in caplog.records] == [
        "replica http://a:8000/v1 ejected after 1 failures in a row (requests)",
        "replica http://a:8000/v1 is back (a request succeeded)"]
    assert a.base_url == "http://vllm:s3cret@A:8000/v1" and a.shown_url == "http://a:8000/v1"
