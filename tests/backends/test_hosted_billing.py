"""Billing a hosted answer whose provider wrote a prompt-cache prefix (backends/hosted/pricing.py),
against litellm's own Anthropic translation and a fake Anthropic Messages API."""

from __future__ import annotations

import pytest

from backends.call import CallReport
from backends.config import BackendConfig, Pricing
from backends.hosted.backend import HostedBackend
from backends.hosted.pricing import (billed_cost, cache_write_1h_tokens, cache_write_counts, cache_write_tokens,
                                     hosted_pricing)
from backends.hosted.sdk import load_litellm
from backends.pricing import cost_usd
from tests.backends.fake_anthropic import create_app, tokens
from tests.backends.fake_upstream import UpstreamState, serve_in_thread

MODEL = "claude-sonnet-4-5"
CLAUDE = Pricing(input_per_1m=3.0, output_per_1m=15.0, cached_input_per_1m=0.3, cache_write_input_per_1m=3.75,
                 cache_write_1h_input_per_1m=6.0)


def test_write_price_from_bundled_map():
    entry = load_litellm().model_cost[MODEL]
    price = hosted_pricing(f"anthropic/{MODEL}")
    assert price.cache_write_input_per_1m == pytest.approx(entry["cache_creation_input_token_cost"] * 1e6)
    assert price.cache_write_input_per_1m == pytest.approx(1.25 * price.input_per_1m)  # the 5-minute write
    assert price.cache_write_1h_input_per_1m == pytest.approx(entry["cache_creation_input_token_cost_above_1hr"] * 1e6)
    assert price.cache_write_1h_input_per_1m == pytest.approx(2 * price.input_per_1m)  # the 1-hour write
    gpt = hosted_pricing("openai/gpt-4o-mini")
    assert gpt.cache_write_input_per_1m is None and gpt.cache_write_1h_input_per_1m is None  # no write surcharge


def _usage(prompt: int, completion: int, cached: int = 0, written: int = 0, written_1h: int | None = None) -> dict:
    """litellm's Anthropic usage, dumped (prompt_tokens counts reads and writes); with
    ``written_1h``, the split by lifetime litellm carries from Anthropic's ``cache_creation``."""
    details = {"cached_tokens": cached, "cache_write_tokens": written, "cache_creation_tokens": written}
    if written_1h is not None:
        details["cache_creation_token_details"] = {"ephemeral_5m_input_tokens": written - written_1h,
                                                   "ephemeral_30m_input_tokens": None,
                                                   "ephemeral_1h_input_tokens": written_1h,
                                                   "ephemeral_12h_input_tokens": None}
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": details, "cache_creation_input_tokens": written, "cache_read_input_tokens": cached}


def test_billed_cost_prices_writes_at_the_write_price():
    assert billed_cost(CLAUDE, _usage(1000, 10, written=900)) == pytest.approx(cost_usd(CLAUDE, 1000, 10, 0, 900))
    assert billed_cost(CLAUDE, _usage(1000, 10, written=900)) == pytest.approx((100 * 3 + 900 * 3.75 + 10 * 15) / 1e6)
    assert billed_cost(CLAUDE, _usage(1000, 10, cached=500, written=400)) == pytest.approx(
        (100 * 3 + 500 * 0.3 + 400 * 3.75 + 10 * 15) / 1e6)


def test_billed_cost_prices_1h_writes_at_the_1h_price():
    assert billed_cost(CLAUDE, _usage(1000, 10, written=900, written_1h=900)) == pytest.approx(
        (100 * 3 + 900 * 6 + 10 * 15) / 1e6)
    assert billed_cost(CLAUDE, _usage(1000, 10, cached=100, written=800, written_1h=300)) == pytest.approx(
        (100 * 3 + 100 * 0.3 + 500 * 3.75 + 300 * 6 + 10 * 15) / 1e6)
    # A split of 5-minute writes only, and no split at all (every write a 5-minute one): the same bill.
    assert billed_cost(CLAUDE, _usage(1000, 10, written=900, written_1h=0)) == pytest.approx(
        billed_cost(CLAUDE, _usage(1000, 10, written=900)))


def test_billed_cost_needs_a_surcharge_on_the_kind_written():
    only_1h = Pricing(input_per_1m=3, output_per_1m=15, cache_write_1h_input_per_1m=6)
    assert billed_cost(only_1h, _usage(1000, 10, written=900, written_1h=0)) is None
    assert billed_cost(only_1h, _usage(1000, 10, written=900, written_1h=400)) == pytest.approx(
        (100 * 3 + 500 * 3 + 400 * 6 + 10 * 15) / 1e6)
    flat = Pricing(input_per_1m=3, output_per_1m=15, cache_write_input_per_1m=3, cache_write_1h_input_per_1m=3)
    assert billed_cost(flat, _usage(1000, 10, written=900, written_1h=400)) is None


def test_billed_cost_leaves_other_answers_to_the_gateway():
    """No write, or writes at the input price: the OpenAI usage already prices the answer."""
    assert billed_cost(CLAUDE, _usage(1000, 10, cached=900)) is None
    assert billed_cost(CLAUDE, {"prompt_tokens": 1000, "completion_tokens": 10}) is None
    assert billed_cost(Pricing(input_per_1m=3, output_per_1m=15), _usage(1000, 10, written=900)) is None


def test_cache_write_tokens_reads_each_of_litellms_names():
    assert cache_write_tokens({"prompt_tokens_details": {"cache_write_tokens": 7}}) == 7
    assert cache_write_tokens({"prompt_tokens_details": {"cache_creation_tokens": 6}}) == 6
    assert cache_write_tokens({"cache_creation_input_tokens": 5, "prompt_tokens_details": None}) == 5
    assert cache_write_tokens({"prompt_tokens": 3}) == 0
    assert cache_write_tokens(None) == 0


def _litellm_usage(anthropic_usage: dict):
    from litellm.llms.anthropic.chat.transformation import AnthropicConfig

    load_litellm()
    return AnthropicConfig().calculate_usage(usage_object=anthropic_usage, reasoning_content=None)


def test_cache_write_1h_tokens_reads_litellms_usage_object_and_its_dump():
    """Anthropic's ``usage.cache_creation`` split, through litellm's own ``calculate_usage``."""
    usage = _litellm_usage({"input_tokens": 10, "output_tokens": 3, "cache_read_input_tokens": 0,
                            "cache_creation_input_tokens": 900,
                            "cache_creation": {"ephemeral_5m_input_tokens": 600, "ephemeral_1h_input_tokens": 300}})
    for shape in (usage, usage.model_dump()):
        assert (cache_write_tokens(shape), cache_write_1h_tokens(shape)) == (900, 300)
    assert billed_cost(CLAUDE, usage) == pytest.approx(cost_usd(CLAUDE, 910, 3, 0, 900, 300))


def test_cache_write_1h_tokens_is_0_without_a_split():
    unsplit = _litellm_usage({"input_tokens": 10, "output_tokens": 3, "cache_creation_input_tokens": 900})
    for shape in (unsplit, unsplit.model_dump()):
        assert (cache_write_tokens(shape), cache_write_1h_tokens(shape)) == (900, 0)
    assert cache_write_1h_tokens({"prompt_tokens_details": {"cache_creation_token_details": None}}) == 0
    assert cache_write_1h_tokens({"prompt_tokens": 3}) == 0
    assert cache_write_1h_tokens(None) == 0


def test_cache_write_counts_are_none_only_where_no_count_is_reported():
    """Anthropic's usage always counts writes (0 included); OpenAI's has no such field."""
    assert cache_write_counts(_usage(1000, 10, written=900, written_1h=300)) == {"tokens": 900, "tokens_1h": 300}
    assert cache_write_counts(_usage(1000, 10, cached=900)) == {"tokens": 0, "tokens_1h": 0}
    assert cache_write_counts({"cache_creation_input_tokens": 5}) == {"tokens": 5, "tokens_1h": 0}
    openai_usage = load_litellm().Usage(prompt_tokens=10, completion_tokens=2, total_tokens=12,
                                        prompt_tokens_details={"cached_tokens": 3})
    for shape in (openai_usage, openai_usage.model_dump(), {"prompt_tokens": 3}, None):
        assert cache_write_counts(shape) is None


@pytest.fixture(scope="module")
def anthropic():
    state = UpstreamState()
    server = serve_in_thread(state, app=create_app(state))
    yield server
    server.stop()


SYSTEM = "You are the billing assistant of ACME. Answer briefly and politely. " * 80  # > 1024 tokens


def _backend(url: str, **kw) -> HostedBackend:
    return HostedBackend(BackendConfig(name="claude", kind="hosted", model=f"anthropic/{MODEL}", api_base=url,
                                       api_key="sk-ant-test", **kw))


def _body(system: str, user: str = "hi") -> dict:
    return {"model": "x", "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]}


def _expected(pricing: Pricing, system: str, user: str, *, written: bool) -> float:
    prefix = tokens(system)
    rest, out = tokens(user), 3  # the fake answers "Hello from <model>."
    return cost_usd(pricing, rest + prefix, out, 0 if written else prefix, prefix if written else 0)


async def test_a_written_prefix_is_billed_through_litellm(anthropic):
    """The backend adds the cache-control breakpoint, the fake writes the prefix, and the
    call's report carries its cost at the write price; the read that follows reports none."""
    backend = _backend(anthropic.url)
    pricing = hosted_pricing(f"anthropic/{MODEL}")
    system = "Send. " + SYSTEM
    report = CallReport()
    first = await backend.send("chat", _body(system), report=report)
    assert anthropic.state.last_body["system"][-1]["cache_control"] == {"type": "ephemeral"}
    assert "cache_creation_input_tokens" not in first["usage"]  # clients still get OpenAI's keys
    assert report.cost_usd == pytest.approx(_expected(pricing, system, "hi", written=True))
    assert report.cost_usd > cost_usd(pricing, first["usage"]["prompt_tokens"], 3)  # above the plain input price
    assert (report.cache_write_tokens, report.cache_write_tokens_1h) == (tokens(system), 0)
    assert not {k for k in first if k.startswith("x_")}  # the report travels beside the answer
    again = CallReport()
    second = await backend.send("chat", _body(system), report=again)
    assert again.cost_usd is None and second["usage"]["prompt_tokens_details"]["cached_tokens"] == tokens(system)
    assert (again.cache_write_tokens, again.cache_write_tokens_1h) == (0, 0)  # counted, none written


async def test_a_written_prefix_is_billed_on_the_usage_chunk_of_a_stream(anthropic):
    backend = _backend(anthropic.url)
    system = "Stream. " + SYSTEM
    report, seen = CallReport(), []
    async for c in backend.stream("chat", _body(system), report=report):
        seen.append((c, report.cost_usd))
    [(billed, cost)] = [(c, cost) for c, cost in seen if c.get("usage")]
    assert billed["usage"]["prompt_tokens"] == tokens(system) + tokens("hi")
    # reported by the time the usage chunk is yielded
    assert cost == pytest.approx(_expected(hosted_pricing(f"anthropic/{MODEL}"), system, "hi", written=True))


async def test_the_policy_write_price_is_the_one_billed(anthropic):
    pricing = Pricing(input_per_1m=1, output_per_1m=2, cache_write_input_per_1m=10)
    backend = _backend(anthropic.url, pricing=pricing)
    system = "Policy. " + SYSTEM
    report = CallReport()
    await backend.send("chat", _body(system), report=report)
    assert report.cost_usd == pytest.approx(_expected(pricing, system, "hi", written=True))


def _hour_body(hour: str, five: str) -> dict:
    """A system message of two parts, the first with the client's own 1-hour breakpoint."""
    system = [{"type": "text", "text": hour, "cache_control": {"type": "ephemeral", "ttl": "1h"}},
              {"type": "text", "text": five}]
    return {"model": "x", "messages": [{"role": "system", "content": system}, {"role": "user", "content": "hi"}]}


async def test_a_clients_1h_breakpoint_is_billed_at_the_1h_price_on_a_stream(anthropic):
    """litellm keeps the client's ``ttl``, the backend adds its 5-minute breakpoint after it,
    and the fake writes the first part to the 1-hour cache and the second to the 5-minute one."""
    backend = _backend(anthropic.url)
    hour, five = "Stream hour. " + SYSTEM, "Stream five. " + SYSTEM
    report = CallReport()
    [c async for c in backend.stream("chat", _hour_body(hour, five), report=report)]
    assert [b.get("cache_control") for b in anthropic.state.last_body["system"]] == [
        {"type": "ephemeral", "ttl": "1h"}, {"type": "ephemeral"}]
    written, written_1h = tokens(hour + five), tokens(hour)
    assert (report.cache_write_tokens, report.cache_write_tokens_1h) == (written, written_1h)
    pricing = hosted_pricing(f"anthropic/{MODEL}")
    assert report.cost_usd == pytest.approx(cost_usd(pricing, written + tokens("hi"), 3, 0, written, written_1h))
    assert report.cost_usd > cost_usd(pricing, written + tokens("hi"), 3, 0, written)  # above the 5-minute bill
