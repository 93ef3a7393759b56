"""A rule's ``max_cost_mode: hard``: ``max_cost_usd`` becomes a ceiling on what a call can
cost, kept by lowering the output-token limit each candidate is sent (the default,
``expected``, only drops candidates whose expected cost is over the limit)."""

from __future__ import annotations

import pytest

from backends.config import Pricing
from router.cost import output_tokens_within, prompt_ceiling_usd
from router.engine import Router, RoutingRequest
from router.errors import BackendNotAllowed, NoAllowedCandidate
from router.policy import PolicyError, parse_policy

POLICY = """version: 1
default_route: capped
backends:
  - {name: strong, kind: fake, model: strong, quality: 0.90, pricing: {input_per_1m: 10, output_per_1m: 30}}
  - {name: mid, kind: fake, model: mid, quality: 0.86, pricing: {input_per_1m: 1, output_per_1m: 3}}
  - {name: weak, kind: fake, model: weak, quality: 0.60, pricing: {input_per_1m: 0.1, output_per_1m: 0.1}}
  - {name: free, kind: fake, model: free, quality: 0.50}
routes:
  - {name: capped, backends: [strong, mid, weak, free], quality_bar: {min_quality: 0.0}}
  - {name: expected, backends: [strong, mid, weak], quality_bar: {min_quality: 0.0}}
  - {name: tiny, backends: [strong, mid], quality_bar: {min_quality: 0.0}}
rules:
  - {name: hard-cap, routes: [capped], max_cost_usd: 0.001, max_cost_mode: hard}
  - {name: soft-cap, routes: [expected], max_cost_usd: 0.001}
  - {name: no-room, routes: [tiny], max_cost_usd: 0.00000001, max_cost_mode: hard}
"""


def _req(model: str, content: str = "hello", admin: bool = False, **extra) -> RoutingRequest:
    return RoutingRequest("chat", {"model": model, "messages": [{"role": "user", "content": content}], **extra},
                          admin=admin)


def test_output_tokens_within_follows_its_formula():
    p = Pricing(input_per_1m=2, output_per_1m=10, per_request=0.0001)
    # prompt: 1000 x 2 / 1e6 + 0.0001 = 0.0021 USD; (0.01 - 0.0021) / (10 / 1e6) = 790 tokens
    assert prompt_ceiling_usd(p, 1000) == pytest.approx(0.0021)
    assert output_tokens_within(p, 1000, 0.01) == 790
    assert output_tokens_within(p, 1000, 0.01, completions=2) == 395  # n completions share the rest
    # a prompt may be written to a prefix cache at a surcharge: the dearer price counts
    written = Pricing(input_per_1m=2, output_per_1m=10, per_request=0.0001, cache_write_input_per_1m=2.5)
    assert output_tokens_within(written, 1000, 0.01) == 740
    assert output_tokens_within(p, 1000, 0.002) == 0  # the prompt alone is over the limit
    assert output_tokens_within(Pricing(input_per_1m=2), 1000, 0.01) is None  # output is free: no limit needed
    assert output_tokens_within(Pricing(input_per_1m=2), 1000, 0.001) == 0


async def test_hard_limit_lowers_each_candidates_output_limit():
    router = Router(parse_policy(POLICY))
    d = await router.decide(_req("capped", max_tokens=1000))
    by = {c.backend: c for c in d.candidates}
    assert set(by) == {"strong", "mid", "weak", "free"}
    # strong: 30 USD per 1M output tokens leaves about 32 tokens of the 0.001 USD; mid about 326
    assert 20 < by["strong"].output_token_cap < by["mid"].output_token_cap < 1000
    assert by["weak"].output_token_cap is None  # 9,800 tokens fit: the client's 1,000 stand
    assert by["free"].output_token_cap is None
    for c in d.candidates:
        assert c.cost_ceiling_usd <= 0.001 + 1e-12, c
    # one more token would break the limit: the cap is the most the limit buys
    strong = by["strong"]
    tokens_in = round((strong.cost_ceiling_usd - strong.output_token_cap * 30 / 1e6) * 1e6 / 10)
    assert tokens_in * 10 / 1e6 + (strong.output_token_cap + 1) * 30 / 1e6 > 0.001
    assert d.token_cap("strong") == strong.output_token_cap and d.token_cap("weak") is None
    recorded = {c["backend"]: c["output_token_cap"] for c in d.record.candidates}
    assert recorded["strong"] == strong.output_token_cap
    assert any("hard-cap: max cost 0.001 USD (hard)" == n for n in d.record.signals["rules"])


async def test_a_client_limit_under_the_cap_stands():
    d = await Router(parse_policy(POLICY)).decide(_req("capped", max_tokens=5))
    assert all(c.output_token_cap is None for c in d.candidates)
    assert all(c.expected_output_tokens == 5 for c in d.candidates)


async def test_without_a_client_limit_the_cap_is_set():
    d = await Router(parse_policy(POLICY)).decide(_req("capped"))
    by = {c.backend: c for c in d.candidates}
    assert by["strong"].output_token_cap is not None and by["weak"].output_token_cap is not None
    assert by["free"].output_token_cap is None
    assert by["strong"].expected_output_tokens <= by["strong"].output_token_cap


async def test_expected_mode_is_unchanged():
    d = await Router(parse_policy(POLICY)).decide(_req("expected", max_tokens=1000))
    assert all(c.output_token_cap is None for c in d.candidates)
    assert all(c.expected_cost_usd <= 0.001 for c in d.candidates)


async def test_a_prompt_too_dear_for_the_limit_leaves_the_backend_out():
    d = await Router(parse_policy(POLICY)).decide(_req("capped", content="word " * 400))
    # about 500 prompt tokens: 0.005 USD on strong, 0.0005 on mid, 0.00005 on weak
    assert {c.backend for c in d.candidates} == {"mid", "weak", "free"}
    with pytest.raises(NoAllowedCandidate, match=r"within the cost limits \(no-room: max cost 1e-08 USD \(hard\)\)"):
        await Router(parse_policy(POLICY)).decide(_req("tiny"))


async def test_pinned_requests_obey_a_hard_limit_unless_an_admin_sends_them():
    # hard-cap alone: a route's rules hold for a request pinned to any of its backends
    policy = "".join(line for line in POLICY.splitlines(keepends=True)
                     if "soft-cap" not in line and "no-room" not in line)
    router = Router(parse_policy(policy))
    d = await router.decide(_req("strong", max_tokens=1000))  # strong is in route 'capped'
    assert d.record.reason == "pinned" and 20 < d.token_cap("strong") < 1000
    assert d.record.candidates[0]["output_token_cap"] == d.token_cap("strong")
    with pytest.raises(BackendNotAllowed, match="hard limit of 0.001 USD"):
        await router.decide(_req("strong", content="word " * 400))
    d = await router.decide(_req("strong", admin=True, max_tokens=1000))
    assert d.token_cap("strong") is None


@pytest.mark.parametrize("rule, line, fragment", [
    ("  - {name: r, require_tags: [x], max_cost_mode: hard}\n", 8, "'max_cost_mode' needs 'max_cost_usd'"),
    ("  - {name: r, max_cost_usd: 1, max_cost_mode: soft}\n", 8, "max_cost_mode"),
])
def test_bad_cost_modes_are_refused_with_their_line(rule, line, fragment):
    text = """version: 1
backends:
  - {name: a, kind: fake, model: a}
routes:
  - {name: auto, backends: [a]}
rules:
  - {name: first, max_cost_usd: 1}
""" + rule
    with pytest.raises(PolicyError) as info:
        parse_policy(text, source="policy.yaml")
    assert f"policy.yaml:{line}" in str(info.value) and fragment in str(info.value)


WINDOWED = """version: 1
backends:
  - {name: small-window, kind: fake, model: s, quality: 0.8, context_tokens: 1000, pricing: {input_per_1m: 0, output_per_1m: 1}}
  - {name: cheap-huge, kind: fake, model: h, quality: 0.8, pricing: {input_per_1m: 0, output_per_1m: 0.000001}}
routes:
  - {name: auto, backends: [small-window, cheap-huge], quality_bar: {min_quality: 0}}
rules:
  - {name: cap, max_cost_usd: LIMIT, max_cost_mode: hard}
"""


@pytest.mark.parametrize("limit, window_cap", [
    (0.01, None),        # 10,000 tokens: more than the 1,000-token window leaves: nothing to send
    (0.0005, 500),       # 500 tokens: within the window, so it is sent
    (1e300, None),       # no integer any provider takes: the limit does not bind
])
async def test_a_cap_is_sent_only_where_it_binds(limit, window_cap):
    d = await Router(parse_policy(WINDOWED.replace("LIMIT", repr(limit)))).decide(_req("auto"))
    assert d.token_cap("small-window") == window_cap
    assert d.token_cap("cheap-huge") is None  # 1e-6 USD per 1M tokens: over UNBOUNDED_OUTPUT tokens


async def test_the_client_limit_backends_read_counts():
    """With both fields, backends (vLLM, the fake backend) read ``max_completion_tokens``:
    1,000 tokens here, over what the limit buys on strong and mid, so the cap binds there
    (dispatch then lowers each field only where it is larger than the cap)."""
    d = await Router(parse_policy(POLICY)).decide(_req("capped", max_tokens=5, max_completion_tokens=1000))
    by = {c.backend: c for c in d.candidates}
    assert 20 < by["strong"].output_token_cap < by["mid"].output_token_cap < 1000
    assert by["weak"].output_token_cap is None  # 9,800 tokens fit: the client's 1,000 stand


async def test_tool_definitions_count_as_prompt_tokens():
    tools = [{"type": "function", "function": {"name": f"tool_{i}", "description": "Look something up. " * 20,
                                               "parameters": {"type": "object", "properties": {}}}}
             for i in range(10)]  # about 1,300 tokens of JSON
    plain = await Router(parse_policy(POLICY)).decide(_req("expected"))
    with_tools = await Router(parse_policy(POLICY)).decide(_req("expected", tools=tools))
    cost = {c.backend: c.expected_cost_usd for c in plain.candidates}
    assert all(c.expected_cost_usd > cost[c.backend] for c in with_tools.candidates)
    # strong: ~1,300 prompt tokens at 10 USD per 1M are over the 0.001 USD hard limit by themselves
    d = await Router(parse_policy(POLICY)).decide(_req("capped", tools=tools))
    assert "strong" not in {c.backend for c in d.candidates}


async def test_a_refusal_records_the_candidates_the_limits_left_out():
    with pytest.raises(NoAllowedCandidate) as info:
        await Router(parse_policy(POLICY)).decide(_req("tiny"))
    notes = {c["backend"]: c["note"] for c in info.value.record.candidates}
    assert set(notes) == {"strong", "mid"}
    assert all(n.startswith("over the hard cost limit of 1e-08 USD with its prompt") for n in notes.values())
