"""The cost formula (router/cost.py): cache reads at a discount, cache writes at a surcharge."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from router.cost import cache_write_price, cost_usd, resolve_pricing
from router.policy import PolicyError, parse_policy
from router.policy.models import Pricing

# Claude Sonnet 4.5's shape of prices (USD per 1M): a write costs 1.25x the input, a read 0.1x.
CLAUDE = Pricing(input_per_1m=3.0, output_per_1m=15.0, cached_input_per_1m=0.3, cache_write_input_per_1m=3.75)


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


def test_a_hosted_model_the_map_does_not_price_needs_a_base_price():
    unknown = POLICY.replace("anthropic/claude-sonnet-4-5", "openai/gpt-9-nonexistent")
    with pytest.raises(PolicyError, match="has no price for 'openai/gpt-9-nonexistent'"):
        parse_policy(unknown.replace("input_per_1m: 3, output_per_1m: 15, ", ""))
    assert resolve_pricing(parse_policy(unknown).policy.backend("claude")).input_per_1m == 3


def test_gpu_pricing_takes_no_cache_token_prices():
    for extra in ("cache_write_input_per_1m: 3.75", "cached_input_per_1m: 0.3"):
        with pytest.raises(PolicyError, match="not both"):
            parse_policy(POLICY.replace("input_per_1m: 3, output_per_1m: 15, cache_write_input_per_1m: 6",
                                        f"gpu_usd_per_hour: 4, output_tokens_per_s: 2500, {extra}"))


@pytest.mark.parametrize("value", ["-1", "true", "'x'"])
def test_a_bad_write_price_is_an_error_at_its_line(value):
    with pytest.raises(PolicyError) as info:
        parse_policy(POLICY.replace("cache_write_input_per_1m: 6", f"cache_write_input_per_1m: {value}"),
                     source="policy.yaml")
    assert str(info.value).startswith("policy.yaml:7 backends[0].pricing.cache_write_input_per_1m: "), str(info.value)


def test_an_unknown_price_key_is_still_refused():
    with pytest.raises(PolicyError) as info:
        parse_policy(POLICY.replace("cache_write_input_per_1m", "cache_creation_per_1m"), source="policy.yaml")
    assert "policy.yaml:7 backends[0].pricing" in str(info.value) and "cache_creation_per_1m" in str(info.value)
