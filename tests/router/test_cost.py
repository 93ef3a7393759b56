"""The cost formula (backends/pricing.py): cache reads at a discount, cache writes (5-minute and 1-hour) at a surcharge."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from backends.catalog import resolve_pricing
from backends.config import Pricing
from backends.pricing import cache_write_1h_price, cache_write_price, cost_usd
from router.policy import PolicyError, parse_policy

# Claude Sonnet 4.5's shape of prices (USD per 1M): a write costs 1.25x the input, a read 0.1x.
CLAUDE = Pricing(input_per_1m=3.0, output_per_1m=15.0, cached_input_per_1m=0.3, cache_write_input_per_1m=3.75,
                 cache_write_1h_input_per_1m=6.0)  # a 1-hour write costs 2x the input


def test_neither_reads_nor_writes():
    assert cost_usd(CLAUDE, 1000, 100) == pytest.approx((1000 * 3.0 + 100 * 15.0) / 1e6)


def test_reads_are_discounted():
    assert cost_usd(CLAUDE, 1000, 100, tokens_cached=800) == pytest.approx((200 * 3.0 + 800 * 0.3 + 100 * 15.0) / 1e6)


def test_writes_pay_the_surcharge():
    assert cost_usd(CLAUDE, 1000, 100, tokens_cache_write=800) == pytest.approx(
        (200 * 3.0 + 800 * 3.75 + 100 * 15.0) / 1e6)


def test_reads_and_writes_together():
    """Anthropic can read one prefix and write a longer one in the same call: the three
    counts are disjoint parts of prompt_tokens."""
    assert cost_usd(CLAUDE, 1000, 0, tokens_cached=500, tokens_cache_write=300) == pytest.approx(
        (200 * 3.0 + 500 * 0.3 + 300 * 3.75) / 1e6)


def test_write_price_defaults_to_the_input_price():
    plain = Pricing(input_per_1m=3.0, output_per_1m=15.0)
    assert cache_write_price(plain) == 3.0
    assert cost_usd(plain, 1000, 100, tokens_cache_write=800) == cost_usd(plain, 1000, 100)


def test_counts_beyond_the_prompt_are_clamped():
    """Reads are taken first; writes never make the uncached part negative."""
    assert cost_usd(CLAUDE, 100, 0, tokens_cached=80, tokens_cache_write=80) == pytest.approx(
        (80 * 0.3 + 20 * 3.75) / 1e6)
    assert cost_usd(CLAUDE, 100, 0, tokens_cache_write=-5) == cost_usd(CLAUDE, 100, 0)


def test_neither_write_kind_leaves_the_1h_price_unused():
    assert cost_usd(CLAUDE, 1000, 100, tokens_cached=800) == cost_usd(
        CLAUDE.model_copy(update={"cache_write_1h_input_per_1m": 99.0}), 1000, 100, tokens_cached=800)


def test_5m_writes_only_pay_the_5m_price():
    assert cost_usd(CLAUDE, 1000, 100, tokens_cache_write=800, tokens_cache_write_1h=0) == pytest.approx(
        (200 * 3.0 + 800 * 3.75 + 100 * 15.0) / 1e6)


def test_1h_writes_only_pay_the_1h_price():
    assert cost_usd(CLAUDE, 1000, 100, tokens_cache_write=800, tokens_cache_write_1h=800) == pytest.approx(
        (200 * 3.0 + 800 * 6.0 + 100 * 15.0) / 1e6)


def test_5m_and_1h_writes_together():
    """``tokens_cache_write`` counts both lifetimes; ``tokens_cache_write_1h`` is its 1-hour part."""
    assert cost_usd(CLAUDE, 1000, 100, tokens_cached=100, tokens_cache_write=800, tokens_cache_write_1h=300) == \
        pytest.approx((100 * 3.0 + 100 * 0.3 + 500 * 3.75 + 300 * 6.0 + 100 * 15.0) / 1e6)


def test_1h_writes_are_clamped_to_the_writes():
    assert cost_usd(CLAUDE, 1000, 0, tokens_cache_write=100, tokens_cache_write_1h=500) == pytest.approx(
        (900 * 3.0 + 100 * 6.0) / 1e6)
    assert cost_usd(CLAUDE, 1000, 0, tokens_cache_write=100, tokens_cache_write_1h=-5) == cost_usd(
        CLAUDE, 1000, 0, tokens_cache_write=100)


def test_1h_price_defaults_to_the_5m_write_price_then_the_input_price():
    assert cache_write_1h_price(CLAUDE) == 6.0
    five = CLAUDE.model_copy(update={"cache_write_1h_input_per_1m": None})
    assert cache_write_1h_price(five) == 3.75
    assert cost_usd(five, 1000, 0, tokens_cache_write=800, tokens_cache_write_1h=800) == cost_usd(
        five, 1000, 0, tokens_cache_write=800)
    assert cache_write_1h_price(Pricing(input_per_1m=3.0, output_per_1m=15.0)) == 3.0


@given(st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 10**6))
def test_a_1h_write_never_costs_less_than_a_5m_one_when_it_is_dearer(tokens_in, written, written_1h):
    assert cost_usd(CLAUDE, tokens_in, 0, 0, written, written_1h) >= cost_usd(CLAUDE, tokens_in, 0, 0, written) - 1e-12


@given(st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 10**6))
def test_a_write_never_costs_less_than_uncached_input_when_it_is_dearer(tokens_in, cached, written):
    assert cost_usd(CLAUDE, tokens_in, 0, cached, written) >= cost_usd(CLAUDE, tokens_in, 0, cached) - 1e-12


POLICY = """version: 1
backends:
  - name: claude
    kind: hosted
    model: anthropic/claude-sonnet-4-5
    quality: 0.9
    pricing: {input_per_1m: 3, output_per_1m: 15, cache_write_input_per_1m: 6}
routes:
  - {name: auto, backends: [claude]}
"""


def test_the_policy_price_overrides():
    pricing = resolve_pricing(parse_policy(POLICY).policy.backend("claude"))
    assert pricing.cache_write_input_per_1m == 6
    assert cost_usd(pricing, 1000, 0, tokens_cache_write=1000) == pytest.approx(6 / 1e3)


def test_policy_prices_replace_the_maps_one_by_one():
    """From a fresh-user pass: ``pricing: {cache_write_input_per_1m: X}`` alone replaced the
    whole map, so the model cost $0 and won every route. Each field the policy sets replaces
    the map's; the others stay the map's (claude-sonnet-4-5: 3 / 15 / read 0.3 / write 3.75)."""
    only_write = resolve_pricing(parse_policy(POLICY.replace("input_per_1m: 3, output_per_1m: 15, ", "")).policy
                                 .backend("claude"))
    assert (only_write.input_per_1m, only_write.output_per_1m, only_write.cached_input_per_1m,
            only_write.cache_write_input_per_1m) == pytest.approx((3, 15, 0.3, 6))
    no_write = resolve_pricing(parse_policy(POLICY.replace(", cache_write_input_per_1m: 6", "")
                                            .replace("input_per_1m: 3", "input_per_1m: 2")).policy.backend("claude"))
    assert (no_write.input_per_1m, cache_write_price(no_write)) == pytest.approx((2, 3.75))


def test_the_1h_price_comes_from_the_map_and_is_replaced_on_its_own():
    """claude-sonnet-4-5 in litellm's map: 1-hour write 6 (2x input). The policy's 5-minute
    price does not move the map's 1-hour one (field by field); its own 1-hour price does."""
    bare = POLICY.replace("    pricing: {input_per_1m: 3, output_per_1m: 15, cache_write_input_per_1m: 6}\n", "")
    assert cache_write_1h_price(resolve_pricing(parse_policy(bare).policy.backend("claude"))) == pytest.approx(6)
    five = resolve_pricing(parse_policy(POLICY.replace("cache_write_input_per_1m: 6", "cache_write_input_per_1m: 5"))
                           .policy.backend("claude"))
    assert (cache_write_price(five), cache_write_1h_price(five)) == pytest.approx((5, 6))
    hour = resolve_pricing(parse_policy(POLICY.replace("input_per_1m: 3, output_per_1m: 15, cache_write_input_per_1m: 6",
                                                       "cache_write_1h_input_per_1m: 7")).policy.backend("claude"))
    assert (hour.input_per_1m, cache_write_price(hour), cache_write_1h_price(hour)) == pytest.approx((3, 3.75, 7))


def test_a_backend_the_map_does_not_price_takes_its_5m_write_price_for_1h_writes():
    fake = POLICY.replace("kind: hosted", "kind: fake").replace("anthropic/claude-sonnet-4-5", "claude-like")
    assert cache_write_1h_price(resolve_pricing(parse_policy(fake).policy.backend("claude"))) == 6


def test_a_hosted_model_the_map_does_not_price_needs_a_base_price():
    unknown = POLICY.replace("anthropic/claude-sonnet-4-5", "openai/gpt-9-nonexistent")
    for partial in ("", "input_per_1m: 3, ", "output_per_1m: 15, "):  # one token price left the other at $0
        with pytest.raises(PolicyError, match="has no price for 'openai/gpt-9-nonexistent'"):
            parse_policy(unknown.replace("input_per_1m: 3, output_per_1m: 15, ", partial))
    assert resolve_pricing(parse_policy(unknown).policy.backend("claude")).input_per_1m == 3


def test_gpu_pricing_takes_no_cache_token_prices():
    for extra in ("cache_write_input_per_1m: 3.75", "cached_input_per_1m: 0.3", "cache_write_1h_input_per_1m: 6"):
        with pytest.raises(PolicyError, match="not both"):
            parse_policy(POLICY.replace("input_per_1m: 3, output_per_1m: 15, cache_write_input_per_1m: 6",
                                        f"gpu_usd_per_hour: 4, output_tokens_per_s: 2500, {extra}"))


@pytest.mark.parametrize("field", ["cache_write_input_per_1m", "cache_write_1h_input_per_1m"])
@pytest.mark.parametrize("value", ["-1", "true", "'x'"])
def test_a_bad_write_price_is_an_error_at_its_line(field, value):
    with pytest.raises(PolicyError) as info:
        parse_policy(POLICY.replace("cache_write_input_per_1m: 6", f"{field}: {value}"), source="policy.yaml")
    assert str(info.value).startswith(f"policy.yaml:7 backends[0].pricing.{field}: "), str(info.value)


def test_an_unknown_price_key_is_still_refused():
    with pytest.raises(PolicyError) as info:
        parse_policy(POLICY.replace("cache_write_input_per_1m", "cache_creation_per_1m"), source="policy.yaml")
    assert "policy.yaml:7 backends[0].pricing" in str(info.value) and "cache_creation_per_1m" in str(info.value)
