"""Billing a hosted answer whose provider wrote a prompt-cache prefix (backends/hosted/pricing.py),
against litellm's own Anthropic translation and a fake Anthropic Messages API."""

from __future__ import annotations

import pytest

from backends.base import COST_KEY
from backends.hosted.backend import HostedBackend, load_litellm
from backends.hosted.pricing import billed_cost, cache_write_tokens, hosted_pricing
from router.cost import cost_usd
from router.policy.models import BackendConfig, Pricing
from tests.backends.fake_anthropic import create_app, tokens
from tests.backends.fake_upstream import UpstreamState, serve_in_thread

MODEL = "claude-sonnet-4-5"
CLAUDE = Pricing(input_per_1m=3.0, output_per_1m=15.0, cached_input_per_1m=0.3, cache_write_input_per_1m=3.75)


def test_write_price_from_bundled_map():
    entry = load_litellm().model_cost[MODEL]
    price = hosted_pricing(f"anthropic/{MODEL}")
    assert price.cache_write_input_per_1m == pytest.approx(entry["cache_creation_input_token_cost"] * 1e6)
    assert price.cache_write_input_per_1m == pytest.approx(1.25 * price.input_per_1m)  # the 5-minute write
    assert hosted_pricing("openai/gpt-4o-mini").cache_write_input_per_1m is None  # no write surcharge in the map


def _usage(prompt: int, completion: int, cached: int = 0, written: int = 0) -> dict:
    """litellm's Anthropic usage, dumped (prompt_tokens counts reads and writes)."""
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached, "cache_write_tokens": written,
                                      "cache_creation_tokens": written},
            "cache_creation_input_tokens": written, "cache_read_input_tokens": cached}


def test_billed_cost_prices_writes_at_the_write_price():
    assert billed_cost(CLAUDE, _usage(1000, 10, written=900)) == pytest.approx(cost_usd(CLAUDE, 1000, 10, 0, 900))
    assert billed_cost(CLAUDE, _usage(1000, 10, written=900)) == pytest.approx((100 * 3 + 900 * 3.75 + 10 * 15) / 1e6)
    assert billed_cost(CLAUDE, _usage(1000, 10, cached=500, written=400)) == pytest.approx(
        (100 * 3 + 500 * 0.3 + 400 * 3.75 + 10 * 15) / 1e6)


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
    answer carries its cost at the write price; the read that follows carries none."""
    backend = _backend(anthropic.url)
    pricing = hosted_pricing(f"anthropic/{MODEL}")
    system = "Send. " + SYSTEM
    first = await backend.send("chat", _body(system))
    assert anthropic.state.last_body["system"][-1]["cache_control"] == {"type": "ephemeral"}
    assert "cache_creation_input_tokens" not in first["usage"]  # clients still get OpenAI's keys
    assert first[COST_KEY] == pytest.approx(_expected(pricing, system, "hi", written=True))
    assert first[COST_KEY] > cost_usd(pricing, first["usage"]["prompt_tokens"], 3)  # above the plain input price
    second = await backend.send("chat", _body(system))
    assert COST_KEY not in second and second["usage"]["prompt_tokens_details"]["cached_tokens"] == tokens(system)


async def test_a_written_prefix_is_billed_on_the_usage_chunk_of_a_stream(anthropic):
    backend = _backend(anthropic.url)
    system = "Stream. " + SYSTEM
    chunks = [c async for c in backend.stream("chat", _body(system))]
    [billed] = [c for c in chunks if COST_KEY in c]
    assert billed["usage"]["prompt_tokens"] == tokens(system) + tokens("hi")
    assert billed[COST_KEY] == pytest.approx(_expected(hosted_pricing(f"anthropic/{MODEL}"), system, "hi", written=True))


async def test_the_policy_write_price_is_the_one_billed(anthropic):
    pricing = Pricing(input_per_1m=1, output_per_1m=2, cache_write_input_per_1m=10)
    backend = _backend(anthropic.url, pricing=pricing)
    system = "Policy. " + SYSTEM
    answer = await backend.send("chat", _body(system))
    assert answer[COST_KEY] == pytest.approx(_expected(pricing, system, "hi", written=True))
