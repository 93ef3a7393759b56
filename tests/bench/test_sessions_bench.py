"""The session benchmark's model: the engine decides every turn, copies of a conversation on
hosted backends expire with time away, and each policy's figures follow from its choices."""

from __future__ import annotations

from bench import sessions as bench


async def test_the_policies_hold_their_shape_on_a_small_run():
    rows = {r["policy"]: r for r in await bench.run(4, 3, "agent")}
    assert rows["always_strongest"]["switches_median"] == 0 and rows["always_strongest"]["strong_share"] == 1
    assert rows["always_cheapest"]["strong_share"] == 0 and rows["always_cheapest"]["bar_cleared_share"] < 1
    for name in ("per_request", "session", "session_downgrade"):
        assert rows[name]["bar_cleared_share"] == 1  # the bar holds on every turn
    assert rows["session"]["switches_median"] <= 1 < rows["per_request"]["switches_median"]
    assert rows["session"]["cached_share_after_turn_2"] > rows["per_request"]["cached_share_after_turn_2"]


async def test_hosted_copies_expire_with_long_gaps():
    agent = {r["policy"]: r for r in await bench.run(3, 5, "agent")}
    chat = {r["policy"]: r for r in await bench.run(3, 5, "chat")}
    # Same conversations, same choices; minutes between turns lose the hosted caches.
    assert chat["always_strongest"]["cached_share_after_turn_2"] < agent["always_strongest"]["cached_share_after_turn_2"]
    assert chat["always_strongest"]["usd_per_session"] > agent["always_strongest"]["usd_per_session"]
    # The local pool's copies never expire (its eviction is not modelled).
    assert chat["always_cheapest"]["cached_share_after_turn_2"] == agent["always_cheapest"]["cached_share_after_turn_2"]
