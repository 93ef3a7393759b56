"""Hosted (litellm) specifics: argument building, error translation, pricing, lazy import."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from backends.call import CallReport
from backends.config import BackendConfig
from backends.errors import BackendConnectError, BackendContextExceeded, BackendError, BackendRateLimited, BackendTimeout
from backends.hosted.backend import OPENAI_KEYS, HostedBackend, translate_error
from backends.hosted.pricing import hosted_pricing
from backends.hosted.sdk import load_litellm
from tests.backends.test_vllm import dead_url

CHAT = {"messages": [{"role": "user", "content": "hi there"}]}
ROOT = Path(__file__).resolve().parents[2]


def hosted(model: str = "openai/m", **kw) -> HostedBackend:
    kw.setdefault("api_key", "sk-test")
    return HostedBackend(BackendConfig(name="h", kind="hosted", model=model, **kw))


def test_call_kwargs_split_known_and_unknown_fields():
    backend = hosted(api_base="http://up/v1", options={"drop_params": True, "extra_body": {"a": 1}, "max_retries": 2})
    kwargs = backend.call_kwargs({
        "model": "client-model", "stream": True, "stream_options": {"include_usage": False},
        **CHAT, "temperature": 0.5, "tools": [], "top_k": 3,
        "api_base": "http://evil/v1", "api_key": "stolen", "base_url": "http://evil", "metadata": {"k": "v"},
    })
    assert kwargs["model"] == "openai/m" and kwargs["api_base"] == "http://up/v1" and kwargs["api_key"] == "sk-test"
    assert kwargs["messages"] == CHAT["messages"] and kwargs["temperature"] == 0.5 and kwargs["tools"] == []
    assert kwargs["drop_params"] is True and kwargs["max_retries"] == 2
    assert kwargs["extra_body"] == {"a": 1, "top_k": 3, "api_base": "http://evil/v1", "api_key": "stolen",
                                    "base_url": "http://evil", "metadata": {"k": "v"}}
    assert "stream" not in kwargs and "stream_options" not in kwargs and "base_url" not in kwargs
    assert kwargs["timeout"].connect == 5.0 and kwargs["timeout"].read == 600.0


def test_anthropics_own_fields_are_keyword_arguments_not_extra_body():
    # litellm sends extra_body to Anthropic as a literal key, which Anthropic refuses.
    thinking = {"type": "enabled", "budget_tokens": 2048}
    kwargs = hosted(model="anthropic/claude-sonnet-4-5").call_kwargs(
        {"model": "x", **CHAT, "top_k": 5, "thinking": thinking, "container": "c1", "odd": 1})
    assert (kwargs["top_k"], kwargs["thinking"], kwargs["container"]) == (5, thinking, "c1")
    assert kwargs["extra_body"] == {"odd": 1}
    assert "top_k" not in hosted().call_kwargs({"model": "x", **CHAT, "top_k": 5})  # OpenAI's: in extra_body


def test_litellm_fetches_no_config_over_the_network(monkeypatch):
    litellm = load_litellm()
    from litellm import anthropic_beta_headers_manager as beta

    monkeypatch.setattr(beta, "_BETA_HEADERS_CONFIG", None)
    monkeypatch.setattr(beta.httpx, "get", lambda *a, **k: pytest.fail(f"litellm fetched {a}"))
    assert beta.get_beta_headers_config(litellm.anthropic_beta_headers_url)  # its bundled table


def test_call_kwargs_defaults():
    kwargs = hosted(api_key=None).call_kwargs({"model": "x", **CHAT})
    assert kwargs["max_retries"] == 0 and "extra_body" not in kwargs
    assert "api_key" not in kwargs and "api_base" not in kwargs


async def test_client_cannot_redirect_the_call(upstream, upstream_state):
    backend = hosted(api_base=upstream.v1())
    await backend.send("chat", {"model": "x", **CHAT, "api_base": dead_url(), "base_url": dead_url()})
    assert upstream_state.last_headers["authorization"] == "Bearer sk-test"
    assert upstream_state.last_body["model"] == "m"


async def test_connect_error(upstream_state):
    backend = hosted(api_base=dead_url())
    with pytest.raises(BackendConnectError):
        await backend.send("chat", {"model": "x", **CHAT})
    with pytest.raises(BackendConnectError):
        async for _ in backend.stream("chat", {"model": "x", **CHAT}):
            pass


async def test_a_stream_answered_by_a_web_page_is_a_failure_before_the_first_chunk(upstream):
    """From a fresh-user pass: litellm turned a 200 text/html answer into one empty chunk with
    finish_reason "stop", and the gateway logged an empty successful answer at $0 (no
    fallback). It is now a retryable error raised before anything is yielded."""
    from backends.errors import BackendServerError

    backend = hosted(model="openai/m-html", api_base=upstream.v1())
    chunks = []
    with pytest.raises(BackendServerError, match="carried no output and no usage"):
        async for chunk in backend.stream("chat", {"model": "x", **CHAT}):
            chunks.append(chunk)
    assert chunks == []
    normal = [c async for c in hosted(api_base=upstream.v1()).stream("chat", {"model": "x", **CHAT})]
    assert any(c.get("usage") for c in normal)  # a real stream still passes, usage last


def assert_openai_shaped(obj: dict) -> None:
    assert set(obj) <= OPENAI_KEYS["response"], obj
    for choice in obj["choices"]:
        assert set(choice) <= OPENAI_KEYS["choice"], choice
        for key in ("message", "delta"):
            assert set(choice.get(key) or {}) <= OPENAI_KEYS["message"], choice
        assert choice.get("text", "") is not None, choice
    usage = obj.get("usage") or {}
    assert set(usage) <= OPENAI_KEYS["usage"], usage
    for key in ("prompt_tokens_details", "completion_tokens_details"):
        assert set(usage.get(key) or {}) <= OPENAI_KEYS[key], usage


@pytest.mark.parametrize("endpoint,body", [("chat", CHAT), ("completions", {"prompt": "hi there"})])
async def test_answers_are_openai_shaped(upstream, endpoint, body):
    """Clients call the gateway as the OpenAI API: provider_specific_fields, usage.cost,
    Anthropic's inference_geo and cache_*_input_tokens, citations and litellm's "text": null
    at the end of a completions stream all reached them. Cached tokens still count."""
    backend = hosted(model="openai/m-extras", api_base=upstream.v1())
    report = CallReport()
    answer = await backend.send(endpoint, {"model": "x", **body}, report=report)
    chunks = [c async for c in backend.stream(endpoint, {"model": "x", **body})]
    for obj in (answer, *chunks):
        assert_openai_shaped(obj)
    usage = [c["usage"] for c in chunks if c.get("usage")]
    assert answer["usage"]["prompt_tokens_details"]["cached_tokens"] == 2
    assert usage[-1]["prompt_tokens_details"]["cached_tokens"] == 2
    # the cache_creation_input_tokens the upstream sent are counted for the outcome store, not shown
    assert (report.cache_write_tokens, report.cache_write_tokens_1h) == (1, 0)
    text = "".join((c.get("delta") or {}).get("content") or c.get("text") or "" for ch in chunks for c in ch["choices"])
    assert text == "Hello from m-extras. You said: hi there"


def test_thinking_blocks_and_reasoning_content_are_kept():
    """Claude's extended-thinking blocks must go back on the next assistant turn of a tool-use
    conversation; cutting them broke such conversations. Provider extras still go."""
    from backends.hosted.backend import to_dict

    block = {"type": "thinking", "thinking": "2 + 2 = 4", "signature": "sig=="}
    raw = {"id": "x", "object": "chat.completion", "created": 1, "model": "claude", "provider_specific_fields": {},
           "choices": [{"index": 0, "finish_reason": "stop", "message": {
               "role": "assistant", "content": "4", "reasoning_content": "2 + 2 = 4", "thinking_blocks": [block],
               "provider_specific_fields": {"citations": None}}}]}
    message = to_dict(raw)["choices"][0]["message"]
    assert message == {"role": "assistant", "content": "4", "reasoning_content": "2 + 2 = 4", "thinking_blocks": [block]}
    assert "provider_specific_fields" not in to_dict(raw)


async def test_timeout(upstream):
    backend = hosted(model="openai/m-slow", api_base=upstream.v1(), timeout_s=0.1)
    with pytest.raises(BackendTimeout):
        await backend.send("chat", {"model": "x", **CHAT})


def test_translate_error_classes_and_redaction():
    litellm = load_litellm()
    rate = litellm.RateLimitError("slow down sk-live-1", llm_provider="openai", model="m")
    error = translate_error(rate, backend="h", secret="sk-live-1")
    assert isinstance(error, BackendRateLimited) and "sk-live-1" not in error.message
    unsupported = litellm.UnsupportedParamsError(message="logit_bias not supported", llm_provider="x", model="m")
    error = translate_error(unsupported, backend="h")
    assert type(error) is BackendError and error.retryable and error.code == "upstream_unsupported_params"
    assert type(translate_error(RuntimeError("boom"), backend="h")) is BackendError


def test_a_context_window_error_without_a_body_still_has_its_code():
    # Anthropic says "prompt is too long" with no param or code: litellm's class tells.
    litellm = load_litellm()
    exc = litellm.ContextWindowExceededError(message="prompt is too long", model="m", llm_provider="anthropic")
    error = translate_error(exc, backend="h")
    assert type(error) is BackendContextExceeded and error.code == "context_length_exceeded" and error.param is None


async def test_a_model_litellm_has_no_provider_for_is_the_backends_fault():
    # The real litellm call: provider resolution fails before any request is sent.
    backend = hosted(model="not-a-provider-model")
    with pytest.raises(BackendError) as caught:
        await backend.send("chat", {"model": "x", **CHAT})
    error = caught.value
    assert type(error) is BackendError and error.retryable and error.code == "upstream_unavailable"
    assert error.status == 502 and "LLM Provider NOT provided" in error.message


def test_pricing_from_bundled_map():
    entry = load_litellm().model_cost["gpt-4o-mini"]
    price = hosted_pricing("openai/gpt-4o-mini")
    assert price == hosted_pricing("gpt-4o-mini")
    assert price.input_per_1m == pytest.approx(entry["input_cost_per_token"] * 1e6)
    assert price.output_per_1m == pytest.approx(entry["output_cost_per_token"] * 1e6)
    assert price.cached_input_per_1m == pytest.approx(entry["cache_read_input_token_cost"] * 1e6)
    assert hosted_pricing("nobody/no-such-model") is None


def test_importing_the_backend_does_not_import_litellm():
    code = "import sys, backends.hosted.backend, backends.hosted.pricing; sys.exit('litellm' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, timeout=60).returncode == 0


def test_litellm_log_lines_are_printed_once():
    """litellm gives its loggers a stderr handler and lets them propagate: with the gateway's
    root handler every line came out twice, in two formats."""
    code = ("import logging; logging.basicConfig(format='ROOT %(name)s %(message)s')\n"
            "from backends.hosted.sdk import load_litellm; load_litellm()\n"
            "logging.getLogger('LiteLLM').warning('one line')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    lines = [line for line in out.stderr.splitlines() if "one line" in line]
    assert lines == ["ROOT LiteLLM one line"], out.stderr
