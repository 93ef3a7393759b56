"""The Messages door in front of an Anthropic-hosted backend (litellm's Anthropic provider,
faked at the HTTP edge by :mod:`tests.backends.fake_anthropic`): the client's
``cache_control`` breakpoints reach the provider where the client put them, and the cache
reads and writes are recorded and billed as on the other doors."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import pytest

from backends.hosted.sdk import load_litellm
from tests.backends.fake_anthropic import create_app, tokens
from tests.backends.fake_upstream import RunningServer, UpstreamState, serve_in_thread
from tests.gateway.conftest import Gateway, start_gateway, wait_row

MODEL = "claude-sonnet-4-5"
STABLE = "You are the support assistant of ACME. Answer briefly and politely. " * 80  # > 1024 tokens
VOLATILE = "The customer's plan is Gold."


@pytest.fixture(scope="module")
def provider() -> Iterator[RunningServer]:
    state = UpstreamState()
    server = serve_in_thread(state, app=create_app(state))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory, provider) -> Iterator[Gateway]:
    policy = f"""version: 1
backends:
  - {{name: claude, kind: hosted, model: anthropic/{MODEL}, api_base: "{provider.url}", api_key: sk-ant-test, quality: 0.9}}
routes:
  - {{name: auto, backends: [claude]}}
"""
    gw = start_gateway(tmp_path_factory.mktemp("messages-anthropic"), policy)
    yield gw
    gw.stop()


def _usd(uncached: int, read: int, written_1h: int, out: int) -> float:
    """USD from litellm's bundled per-token prices, independently of the gateway's Pricing."""
    e = load_litellm().model_cost[MODEL]
    return (uncached * e["input_cost_per_token"] + read * e["cache_read_input_token_cost"]
            + written_1h * e["cache_creation_input_token_cost_above_1hr"] + out * e["output_cost_per_token"])


def test_breakpoints_pass_through_and_caches_are_billed(gateway, provider):
    client = anthropic.Anthropic(base_url=gateway.url, api_key="unused", max_retries=0)
    system = [{"type": "text", "text": STABLE, "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    outcomes = []
    for question in ("Where is my order?", "Can I return it?"):
        raw = client.messages.with_raw_response.create(model="auto", max_tokens=100, system=system,
                                                       messages=[{"role": "user", "content": VOLATILE + question}])
        assert raw.headers["x-mixroute-backend"] == "claude" and raw.parse().content[0].text
        sent = provider.state.last_body["system"]
        # The client's breakpoint as it sent it (the gateway's own hint has no 1-hour ttl).
        assert len(sent) == 1 and sent[0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
        outcome = wait_row(gateway.settings.database_url, "outcomes", raw.headers["x-mixroute-request-id"])
        outcomes.append((raw.parse().usage, outcome, question))
    prefix = tokens(provider.state.last_body["system"][0]["text"])  # as the rewriter left it
    (first_usage, first, q1), (usage, second, q2) = outcomes
    # The client's usage splits the prompt as Anthropic's does: uncached, written, read.
    assert (first_usage.input_tokens, first_usage.cache_creation_input_tokens,
            first_usage.cache_read_input_tokens) == (tokens(VOLATILE + q1), prefix, 0)
    assert first["tokens_cache_write_1h"] == prefix and first["tokens_cached"] == 0
    assert first["cost_usd"] == pytest.approx(_usd(tokens(VOLATILE + q1), 0, prefix, first["tokens_out"]))
    assert second["tokens_cached"] == prefix and not second["tokens_cache_write_1h"]
    assert second["cost_usd"] == pytest.approx(_usd(tokens(VOLATILE + q2), prefix, 0, second["tokens_out"]))
    assert (usage.input_tokens, usage.cache_creation_input_tokens, usage.cache_read_input_tokens) == (
        tokens(VOLATILE + q2), 0, prefix)


def test_streamed_through_the_hosted_backend(gateway):
    client = anthropic.Anthropic(base_url=gateway.url, api_key="unused", max_retries=0)
    stable = "Streamed variant. " + STABLE
    system = [{"type": "text", "text": stable, "cache_control": {"type": "ephemeral"}}]
    with client.messages.stream(model="auto", max_tokens=100, messages=[{"role": "user", "content": "Hi there"}],
                                system=system) as stream:
        final = stream.get_final_message()
    assert final.content[0].type == "text" and final.content[0].text.startswith("Hello from")
    assert final.usage.output_tokens > 0 and final.stop_reason == "end_turn"
    # The write the provider reported, as in Anthropic's own message_delta usage.
    assert final.usage.cache_creation_input_tokens == tokens(stable.strip())
    assert final.usage.input_tokens == tokens("Hi there")


def test_sampling_and_thinking_fields_reach_anthropic_as_its_own(gateway, provider):
    client = anthropic.Anthropic(base_url=gateway.url, api_key="unused", max_retries=0)
    client.messages.create(model="auto", max_tokens=4000, messages=[{"role": "user", "content": "Hi"}],
                           stop_sequences=["END"], metadata={"user_id": "u-1"},
                           thinking={"type": "enabled", "budget_tokens": 2048},
                           # Sampling fields: in the API, no longer parameters of this SDK's create().
                           extra_body={"top_k": 5, "temperature": 0.3})
    sent = provider.state.last_body
    assert sent["top_k"] == 5 and "extra_body" not in sent  # litellm would send extra_body as a key
    assert sent["stop_sequences"] == ["END"] and sent["metadata"] == {"user_id": "u-1"}
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 2048} and sent["temperature"] == 0.3
