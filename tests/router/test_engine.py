"""The decision engine: cheapest candidate above the bar, fallbacks, rules."""

from __future__ import annotations

import asyncio
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from router.engine import Router, RoutingRequest
from router.errors import NoCandidate, UnknownModel
from router.policy import parse_policy

POLICY = """version: 1
backends:
  - {name: strong, kind: fake, model: strong, quality: 0.90, pricing: {input_per_1m: 10, output_per_1m: 30}}
  - {name: mid, kind: fake, model: mid, quality: 0.86, pricing: {input_per_1m: 1, output_per_1m: 3}}
  - {name: weak, kind: fake, model: weak, quality: 0.60, tags: [self_hosted], pricing: {input_per_1m: 0.1, output_per_1m: 0.1}}
routes:
  - {name: auto, backends: [strong, mid, weak], quality_bar: {target: 0.95}}
  - {name: strict, backends: [strong, mid, weak], quality_bar: {min_quality: 0.95}, on_no_candidate: reject}
  - {name: cheap-fallback, backends: [strong, mid, weak], quality_bar: {min_quality: 0.95}, on_no_candidate: cheapest}
  - {name: best-effort, backends: [strong, mid, weak], quality_bar: {min_quality: 0.95}}
  - {name: any, backends: [strong, mid, weak], quality_bar: {min_quality: 0.0}, max_attempts: 2}
rules:
  - {name: private, when_header: x-mixroute-private, require_tags: [self_hosted]}
  - {name: budget, routes: [any], max_cost_usd: 0.001}
"""


def _req(model: str, content: str = "hello", **extra) -> RoutingRequest:
    headers = extra.pop("headers", {})
    return RoutingRequest("chat", {"model": model, "messages": [{"role": "user", "content": content}], **extra},
                          headers=headers)


@pytest.fixture
def router() -> Router:
    return Router(parse_policy(POLICY))


async def test_relative_bar_picks_cheapest_above(router):
    d = await router.decide(_req("auto"))
    assert d.record.chosen == "mid" and d.record.reason == "cheapest_above_bar"
    assert d.bar == pytest.approx(0.95 * 0.90)
    assert d.record.fallbacks == ["strong", "weak"]  # eligible by cost, then the rest by quality
    costs = {c.backend: c.expected_cost_usd for c in d.candidates}
    assert costs["weak"] < costs["mid"] < costs["strong"]
    # Each candidate's note says what counts against it; the record keeps it.
    notes = {c["backend"]: c["note"] for c in d.record.candidates}
    assert notes == {"strong": "", "mid": "", "weak": "predicted quality 0.6 under the bar 0.855"}


async def test_absolute_bar_reject_and_cheapest(router):
    with pytest.raises(NoCandidate):
        await router.decide(_req("strict"))
    d = await router.decide(_req("cheap-fallback"))
    assert d.record.chosen == "weak" and d.record.reason == "below_bar_cheapest"


async def test_best_quality_when_nothing_clears(router):
    d = await router.decide(_req("best-effort"))  # default on_no_candidate: best_quality
    assert d.record.chosen == "strong" and d.record.reason == "below_bar_best_quality"
    assert d.record.fallbacks == ["mid", "weak"]


async def test_rules(router):
    d = await router.decide(_req("auto", headers={"x-mixroute-private": "1"}))
    assert d.record.chosen == "weak" and [c.backend for c in d.candidates] == ["weak"]
    d = await router.decide(_req("any", content="word " * 200))
    assert {c.backend for c in d.candidates} <= {"mid", "weak"}
    assert len(d.record.fallbacks) <= 1


async def test_max_tokens_caps_expected_output(router):
    d = await router.decide(_req("auto", max_tokens=10))
    assert all(c.expected_output_tokens == 10 for c in d.candidates)


async def test_every_completion_asked_for_is_counted_and_max_tokens_sets_a_ceiling(router):
    """From a break-it pass: a legacy `prompt` list of 2,000 prompts was estimated as one
    completion, so a budget of 0.001 USD admitted a 0.205 USD request."""
    from backends.openai_shapes import completions_asked

    assert completions_asked("completions", {"prompt": ["a", "b", "c"], "n": 2}) == 6
    assert completions_asked("completions", {"prompt": [[1, 2], [3]], "best_of": 3, "n": 2}) == 6
    assert completions_asked("completions", {"prompt": [1, 2, 3]}) == 1  # one prompt of token ids
    assert completions_asked("completions", {"prompt": "a"}) == completions_asked("chat", {}) == 1
    assert completions_asked("chat", {"n": 3}) == 3
    one = await router.decide(RoutingRequest("completions", {"model": "any", "prompt": "x", "max_tokens": 10}))
    many = await router.decide(RoutingRequest("completions", {"model": "any", "prompt": ["x"] * 4, "max_tokens": 10}))
    for a, b in zip(one.candidates, many.candidates):
        assert (a.expected_output_tokens, b.expected_output_tokens) == (10, 40)
        assert b.output_tokens_ceiling == 40 and b.cost_ceiling_usd == pytest.approx(b.expected_cost_usd)
    # The ceiling is max_tokens, also where the expected length is shorter.
    d = await router.decide(_req("auto", max_tokens=100_000))
    assert all(c.expected_output_tokens < 100_000 == c.output_tokens_ceiling for c in d.candidates)
    assert all(c.cost_ceiling_usd > c.expected_cost_usd for c in d.candidates)
    assert all(c.cost_ceiling_usd is None for c in (await router.decide(_req("auto"))).candidates)


async def test_pinned_and_unknown(router):
    d = await router.decide(_req("weak"))
    assert d.record.pinned and d.record.reason == "pinned" and d.record.chosen == "weak"
    with pytest.raises(UnknownModel):
        await router.decide(_req("gpt-5"))


@settings(max_examples=60, deadline=None)
@given(qualities=st.lists(st.floats(0, 1), min_size=3, max_size=3),
       bars=st.lists(st.floats(0, 1), min_size=2, max_size=2))
async def test_raising_the_bar_never_lowers_predicted_quality(qualities, bars):
    """Threshold monotonicity: a higher absolute bar never picks a candidate with lower
    predicted quality when the choice clears the bar (cheaper models have lower quality here)."""
    lo, hi = sorted(bars)
    out = []
    for bar in (lo, hi):
        # One pass: chained replaces re-edited earlier values (0.8600001 -> "1.0" + "00001" > 1).
        values = {"0.90": repr(qualities[0]), "0.86": repr(qualities[1]), "0.60": repr(qualities[2]),
                  "{min_quality: 0.0}": f"{{min_quality: {bar!r}}}"}
        text = re.sub("|".join(re.escape(k) for k in values), lambda m: values[m.group()], POLICY)
        d = await Router(parse_policy(text)).decide(_req("any", content="x"))
        out.append((d.record.reason, {c.backend: c for c in d.candidates}[d.record.chosen]))
    (r_lo, c_lo), (r_hi, c_hi) = out
    if r_lo == r_hi == "cheapest_above_bar":
        assert c_hi.expected_cost_usd >= c_lo.expected_cost_usd


async def test_willingness_to_pay_trades_quality_for_cost(router):
    """argmax(w x quality - cost): a large w buys the best quality, a tiny w the cheapest, and in
    between the candidate whose quality gain over the next cheaper one is worth its extra cost."""
    base = (await router.decide(_req("auto"))).candidates
    q = {c.backend: c.predicted_quality for c in base}
    cost = {c.backend: c.expected_cost_usd for c in base}

    def pick(w: float) -> str:
        return max(q, key=lambda b: (w * q[b] - cost[b], q[b]))

    # w at which the upgrade weak -> mid and mid -> strong pay for themselves
    up_mid = (cost["mid"] - cost["weak"]) / (q["mid"] - q["weak"])
    up_strong = (cost["strong"] - cost["mid"]) / (q["strong"] - q["mid"])
    assert up_mid < up_strong
    for w, expected in ((up_mid / 10, "weak"), ((up_mid + up_strong) / 2, "mid"), (up_strong * 10, "strong")):
        r = Router(parse_policy(POLICY.replace("quality_bar: {target: 0.95}", f"quality_bar: {{willingness_to_pay: {w!r}}}")))
        d = await r.decide(_req("auto"))
        assert pick(w) == expected
        assert d.record.chosen == expected, (w, d.record.candidates)
        assert d.bar == pytest.approx(q[expected]) and d.record.reason == "max_utility"
        assert d.record.signals["bar_kind"] == {"willingness_to_pay": w}
        utility = {c["backend"]: c["utility_usd"] for c in d.record.candidates}
        assert max(utility, key=utility.get) == expected


def test_quality_bar_needs_exactly_one_kind():
    from router.policy.loader import PolicyError

    for bar in ("{}", "{target: 0.9, willingness_to_pay: 0.01}", "{min_quality: 0.5, willingness_to_pay: 0.01}",
                "{willingness_to_pay: 0}", "{willingness_to_pay: -1}"):
        with pytest.raises(PolicyError):
            parse_policy(POLICY.replace("quality_bar: {target: 0.95}", f"quality_bar: {bar}"))


def test_willingness_to_pay_of_any_finite_size_decides():
    """A huge (finite) willingness to pay picks the best predicted quality, a tiny one the
    cheapest; infinity and NaN never reach the engine (policy validation)."""
    from router.policy.loader import PolicyError

    for w, expected in ((1e308, "strong"), (5e-324, "weak")):
        r = Router(parse_policy(POLICY.replace("quality_bar: {target: 0.95}", f"quality_bar: {{willingness_to_pay: {w!r}}}")))
        assert (asyncio.run(r.decide(_req("auto")))).record.chosen == expected
    for bad in (".inf", ".nan", "1e400", "true"):
        with pytest.raises(PolicyError, match="willingness_to_pay"):
            parse_policy(POLICY.replace("quality_bar: {target: 0.95}", f"quality_bar: {{willingness_to_pay: {bad}}}"))


async def test_huge_max_tokens_blames_max_tokens():
    from router.errors import ContextTooLong

    r = Router(parse_policy(POLICY.replace("pricing: {input_per_1m: 10", "context_tokens: 8000, pricing: {input_per_1m: 10")
                            .replace("model: mid, quality", "model: mid, context_tokens: 8000, quality")
                            .replace("model: weak, quality", "model: weak, context_tokens: 8000, quality")))
    with pytest.raises(ContextTooLong) as err:
        await r.decide(_req("auto", max_tokens=1_000_000))
    assert err.value.param == "max_tokens"
    with pytest.raises(ContextTooLong) as err:
        await r.decide(_req("auto", content="word " * 40_000))
    assert err.value.param == "messages"


async def test_backends_too_small_for_the_request_are_named():
    """From a break-it pass: a request too long for some of the route's backends left them
    out of the decision without a word."""
    r = Router(parse_policy(POLICY.replace("model: mid, quality", "model: mid, context_tokens: 8000, quality")
                            .replace("model: weak, quality", "model: weak, context_tokens: 8000, quality")))
    d = await r.decide(_req("auto", max_tokens=10_000))
    assert d.record.chosen == "strong" and [c.backend for c in d.candidates] == ["strong"]
    assert d.record.signals["too_long_for"] == ["mid", "weak"]
    d = await r.decide(_req("auto", max_tokens=100))
    assert "too_long_for" not in d.record.signals


async def test_notes_print_the_digits_that_tell_quality_and_bar_apart():
    """From a break-it pass: a prior of 0.8496 under a 0.85 bar read "0.850 under the bar 0.850"."""
    text = POLICY.replace("model: mid, quality: 0.86", "model: mid, quality: 0.8496")
    d = await Router(parse_policy(text)).decide(_req("cheap-fallback"))  # min_quality 0.95: none clears it
    notes = {c.backend: c.note for c in d.candidates}
    assert notes == {"strong": "predicted quality 0.9 under the bar 0.95",
                     "mid": "predicted quality 0.85 under the bar 0.95",
                     "weak": "predicted quality 0.6 under the bar 0.95"}
    d = await Router(parse_policy(text.replace("{min_quality: 0.95}, on_no_candidate: cheapest",
                                               "{min_quality: 0.85}, on_no_candidate: cheapest"))).decide(_req("cheap-fallback"))
    assert {c.backend: c.note for c in d.candidates}["mid"] == "predicted quality 0.8496 under the bar 0.85"


async def test_reject_route_never_falls_back_below_its_bar():
    """``on_no_candidate: reject`` refuses rather than answer below the bar, so when the choice
    fails, only other bar-clearing candidates may answer; other routes fall back to the rest."""
    text = POLICY.replace("- {name: strict, backends: [strong, mid, weak], quality_bar: {min_quality: 0.95}, "
                          "on_no_candidate: reject}",
                          "- {name: strict, backends: [strong, mid, weak], quality_bar: {min_quality: 0.85}, "
                          "on_no_candidate: reject}")
    r = Router(parse_policy(text))
    d = await r.decide(_req("strict"))
    assert d.record.chosen == "mid" and d.record.fallbacks == ["strong"]  # weak (0.60) is below 0.85
    d = await r.decide(_req("auto"))
    assert d.record.fallbacks == ["strong", "weak"]


@settings(max_examples=300, deadline=None)
@given(st.floats(min_value=0, max_value=1e6, allow_nan=False), st.floats(min_value=0, max_value=1e6, allow_nan=False))
def test_apart_reads_low_under_high(a, b):
    """A note's pair of numbers always reads in the right order (rounding is monotone)."""
    from router.choice import _apart

    if a == b:
        return
    low, high = min(a, b), max(a, b)
    x, y = _apart(low, high)
    assert x != y and float(x) < float(y)
