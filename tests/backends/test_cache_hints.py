"""Provider prompt-cache hints of the hosted backend, and cached tokens coming back
through litellm."""

from __future__ import annotations

import pytest

from backends.call import CallContext
from backends.config import BackendConfig
from backends.hosted.backend import HostedBackend
from backends.hosted.cache_hints import MAX_BREAKPOINTS, add_cache_hints, anthropic_min_tokens, prompt_cache_key
from bench.fake_vllm import ReplicaModel, serve_replicas

LONG = "policy text " * 500  # ~1500 tokens by the chars/4 estimate
SCOPE = CallContext(tenant="acme", prefix_hash="0123456789abcdef")


def hosted(model: str, **kw) -> HostedBackend:
    return HostedBackend(BackendConfig(name="h", kind="hosted", model=model, api_key="sk-test", **kw))


def body(system=LONG, **extra) -> dict:
    return {"model": "x", "messages": [{"role": "system", "content": system}, {"role": "user", "content": "q"}],
            **extra}


def test_anthropic_breakpoint_on_the_last_stable_block():
    kw = hosted("anthropic/claude-sonnet-4-20250514").call_kwargs(body(), SCOPE)
    system = kw["messages"][0]["content"]
    assert system == [{"type": "text", "text": LONG, "cache_control": {"type": "ephemeral"}}]
    assert kw["messages"][1] == {"role": "user", "content": "q"}
    assert "acme" not in str(kw)  # the tenant reaches no provider in clear
    assert "prompt_cache_key" not in kw


def test_anthropic_respects_minimum_length_per_model():
    assert "cache_control" not in str(hosted("anthropic/claude-sonnet-4-20250514").call_kwargs(body("short"), SCOPE))
    assert "cache_control" not in str(hosted("anthropic/claude-haiku-4-5").call_kwargs(body(), SCOPE))  # 4096 minimum
    assert anthropic_min_tokens("claude-3-5-haiku-latest") == 2048
    assert anthropic_min_tokens("claude-opus-4.5") == 4096


def test_anthropic_client_hints_are_kept_and_the_limit_respected():
    marked = {"role": "system", "content": [{"type": "text", "text": LONG, "cache_control": {"type": "ephemeral",
                                                                                          "ttl": "1h"}}]}
    kw = hosted("anthropic/claude-sonnet-4-20250514").call_kwargs(
        {"messages": [marked, {"role": "user", "content": "q"}]}, SCOPE)
    assert kw["messages"][0] == marked
    full = [{"role": "system", "content": LONG},
            *({"role": "user", "content": [{"type": "text", "text": f"u{i}", "cache_control": {"type": "ephemeral"}}]}
              for i in range(MAX_BREAKPOINTS))]
    kw = {"model": "claude-sonnet-4", "messages": full}
    assert add_cache_hints(kw, "anthropic", SCOPE.tenant, SCOPE.prefix_hash) is None and kw["messages"] is full


def test_anthropic_tools_only_prefix_marks_the_last_tool():
    tools = [{"type": "function", "function": {"name": f"t{i}", "description": LONG}} for i in range(2)]
    kw = {"model": "claude-sonnet-4", "messages": [{"role": "user", "content": "q"}], "tools": tools}
    assert add_cache_hints(kw, "anthropic", SCOPE.tenant, SCOPE.prefix_hash) == "cache_control"
    assert kw["tools"][-1]["cache_control"] == {"type": "ephemeral"} and "cache_control" not in tools[-1]


def test_anthropic_hint_reaches_the_provider_request_via_litellm():
    from litellm.llms.anthropic.chat.transformation import AnthropicConfig

    kw = hosted("anthropic/claude-sonnet-4-20250514").call_kwargs(body(), SCOPE)
    system = AnthropicConfig().translate_system_message(list(kw["messages"]))
    assert system[-1]["cache_control"] == {"type": "ephemeral"}


@pytest.mark.parametrize("model", ["bedrock/anthropic.claude-3-5-sonnet-20240620-v1:0",
                                   "bedrock/us.anthropic.claude-sonnet-4-20250514-v1:0",
                                   "bedrock/converse/us.anthropic.claude-3-7-sonnet-20250219-v1:0",
                                   "vertex_ai/claude-3-5-sonnet@20240620"])
def test_claude_on_bedrock_and_vertex_gets_the_breakpoint(model):
    kw = hosted(model).call_kwargs(body(), SCOPE)
    assert kw["messages"][0]["content"] == [{"type": "text", "text": LONG, "cache_control": {"type": "ephemeral"}}]
    assert "cache_control" not in str(hosted(model).call_kwargs(body("short"), SCOPE))  # under the 1024-token minimum


def test_other_bedrock_and_vertex_models_get_no_breakpoint():
    for model in ("bedrock/amazon.nova-pro-v1:0", "vertex_ai/gemini-2.0-flash", "bedrock/meta.llama3-70b-instruct-v1:0"):
        kw = hosted(model).call_kwargs(body(), SCOPE)
        assert "cache_control" not in str(kw) and "prompt_cache_key" not in kw, model
    assert "cache_control" not in str(hosted("bedrock/us.anthropic.claude-haiku-4-5-20251001-v1:0").call_kwargs(body(), SCOPE))


def test_bedrock_breakpoint_becomes_a_converse_cache_point_via_litellm():
    from litellm.llms.bedrock.chat.converse_transformation import AmazonConverseConfig

    model = "bedrock/us.anthropic.claude-sonnet-4-20250514-v1:0"
    kw = hosted(model).call_kwargs(body(), SCOPE)
    rest, system = AmazonConverseConfig()._transform_system_message(list(kw["messages"]), model=model.split("/", 1)[1])
    assert system[0] == {"text": LONG} and "cachePoint" in system[1]
    assert len(system) == 2 and rest == [{"role": "user", "content": "q"}]


def test_vertex_breakpoint_reaches_the_anthropic_request_via_litellm():
    from litellm.llms.vertex_ai.vertex_ai_partner_models.anthropic.transformation import VertexAIAnthropicConfig

    kw = hosted("vertex_ai/claude-3-5-sonnet@20240620").call_kwargs(body(), SCOPE)
    system = VertexAIAnthropicConfig().translate_system_message(list(kw["messages"]))
    assert system[-1]["cache_control"] == {"type": "ephemeral"}


def test_openai_prompt_cache_key_per_tenant_and_prefix_unless_client_set_one():
    kw = hosted("openai/gpt-4o-mini").call_kwargs(body(), SCOPE)
    assert kw["prompt_cache_key"] == prompt_cache_key("acme", SCOPE.prefix_hash)
    assert "acme" not in kw["prompt_cache_key"]
    assert prompt_cache_key("other", SCOPE.prefix_hash) != kw["prompt_cache_key"]
    assert hosted("openai/gpt-4o-mini").call_kwargs(body(prompt_cache_key="mine"), SCOPE)["prompt_cache_key"] == "mine"
    assert "prompt_cache_key" not in hosted("gemini/gemini-2.0-flash").call_kwargs(body(), SCOPE)


@pytest.fixture(scope="module")
def replica():
    servers = serve_replicas(1, ReplicaModel(prefill_base_s=0, prefill_s_per_token=0, itl_s=0, output_tokens=2))
    yield servers
    servers.stop()


async def test_litellm_surfaces_cached_tokens(replica):
    backend = hosted("openai/m", api_base=replica.urls[0], timeout_s=10)
    await backend.start()
    first = await backend.send("chat", body())
    second = await backend.send("chat", body())
    chunks = [c async for c in backend.stream("chat", body())]
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached > 0.9 * second["usage"]["prompt_tokens"]
    assert chunks[-1]["usage"]["prompt_tokens_details"]["cached_tokens"] == cached
