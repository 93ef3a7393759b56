"""The session benchmark's model: the engine decides every turn, hosted backends bill cache
reads and writes as their providers do, copies of a conversation expire with time away (the
local pool's after ``local_ttl``), and each policy's figures follow from its choices."""

from __future__ import annotations

import pytest

from bench import sessions as bench
from bench import sessions_model as model
from router.engine import Router
from router.policy import parse_policy

HOLD_THE_BAR = ("per_request", "session", "session_downgrade", "downgrade_uncapped", "always_strongest")


async def test_the_policies_hold_their_shape_on_a_small_run():
    rows = {r["policy"]: r for r in await bench.run(4, 3, "agent")}
    assert rows["always_strongest"]["switches_median"] == 0 and rows["always_strongest"]["strong_share"] == 1
    assert rows["always_cheapest"]["strong_share"] == 0 and rows["always_cheapest"]["bar_cleared_share"] < 1
    for name in HOLD_THE_BAR:
        assert rows[name]["bar_cleared_share"] == 1  # the bar holds on every turn
        # No policy that holds the bar pays less than the best in hindsight, nor that less than the floor.
        assert rows["hindsight"]["usd_per_session"] <= rows[name]["usd_per_session"] + 1e-12
    assert rows["floor"]["usd_per_session"] <= rows["hindsight"]["usd_per_session"] + 1e-12
    assert rows["hindsight"]["bar_cleared_share"] == 1
    assert rows["session"]["switches_median"] <= 1 < rows["per_request"]["switches_median"]
    assert rows["session"]["cached_share_after_turn_2"] > rows["per_request"]["cached_share_after_turn_2"]


async def test_hosted_copies_expire_with_long_gaps_and_the_local_pool_evicts_idle_ones():
    agent = {r["policy"]: r for r in await bench.run(3, 5, "agent")}
    chat = {r["policy"]: r for r in await bench.run(3, 5, "chat")}
    # Same conversations, same choices; minutes between turns lose the hosted caches.
    cached = "cached_share_after_turn_2"
    assert chat["always_strongest"][cached] < agent["always_strongest"][cached]
    assert chat["always_strongest"]["usd_per_session"] > agent["always_strongest"]["usd_per_session"]
    # Agent gaps (3-60 s) stay within the local pool's 60 s; chat gaps mostly do not.
    assert chat["always_cheapest"][cached] < agent["always_cheapest"][cached]
    kept = {r["policy"]: r for r in await bench.run(3, 5, "chat", local_ttl=None)}
    assert kept["always_cheapest"][cached] == agent["always_cheapest"][cached]


async def test_a_conversation_shares_its_difficulty_when_asked():
    rows = {r["policy"]: r for r in await bench.run(4, 3, "agent", difficulty="session")}
    # Every turn of a conversation clears the bar on the same models: nothing moves.
    assert rows["per_request"]["switches_median"] == 0 == rows["hindsight"]["switches_median"]
    convs = bench._conversations(4, 3, bench.PROFILES["agent"], "session")
    assert all(len(set(c["difficulty"])) == 1 for c in convs)
    turn = bench._conversations(4, 3, bench.PROFILES["agent"], "turn")
    assert [c["added"] for c in turn] == [c["added"] for c in convs]  # same texts, other difficulty


def test_providers_bill_cache_writes_and_reads_their_own_way():
    # Anthropic: 1.25x to write, 0.1x to read; OpenAI: no write premium, 0.25x to read.
    assert model.bill("anthropic", "strong", 1_000, 0, 0) == pytest.approx(1_000 * 3.75 / 1e6)
    assert model.bill("anthropic", "strong", 1_000, 0, 1_000) == pytest.approx(1_000 * 0.3 / 1e6)
    assert model.bill("openai", "strong", 1_000, 0, 0) == pytest.approx(1_000 * 2.0 / 1e6)
    assert model.bill("openai", "strong", 1_000, 0, 1_000) == pytest.approx(1_000 * 0.5 / 1e6)
    assert model.bill("openai", "local", 1_000, 100, 500) == pytest.approx((500 * 0.05 + 500 * 0.01 + 100 * 0.08) / 1e6)
    # The engine is priced as it is billed.
    for prices in model.PRICES:
        text = f"version: 1\n{model.backends_yaml(prices)}routes:\n  - {bench.POLICIES['session']}\n"
        router = Router(parse_policy(text))
        for b in model.BACKENDS:
            assert router.pricing[b] == model.pricing(prices, b)


async def test_the_price_tables_change_the_bill_not_the_choices():
    anthropic = {r["policy"]: r for r in await bench.run(3, 5, "agent", prices="anthropic")}
    openai = {r["policy"]: r for r in await bench.run(3, 5, "agent", prices="openai")}
    strongest = "always_strongest"
    assert anthropic[strongest]["strong_share"] == openai[strongest]["strong_share"] == 1
    assert anthropic[strongest]["usd_per_session"] != openai[strongest]["usd_per_session"]
    assert anthropic["always_cheapest"]["usd_per_session"] == openai["always_cheapest"]["usd_per_session"]
