"""The OpenAI API's request rules the gateway checks before routing: content part types per
role, tools and tool_choice, tool calls, typed chat options and the legacy completions'
best_of/echo/suffix. A request breaking one gets a 400 naming the exact field and never
reaches a backend; requests within the rules, vLLM's extensions included, arrive unchanged.

The gateway serves a vLLM pool whose one replica is the fake upstream
(:mod:`tests.backends.fake_upstream`), so what reached the backend is what the upstream saw.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.backends.fake_upstream import RunningServer
from tests.gateway.conftest import Gateway, start_pool_gateway

USER = {"role": "user", "content": "hi"}
FN = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}


@pytest.fixture(scope="module")
def gateway(upstream, tmp_path_factory) -> Iterator[Gateway]:
    gw = start_pool_gateway(tmp_path_factory.mktemp("rules"), upstream)
    yield gw
    gw.stop()


def _refused(gw: Gateway, upstream: RunningServer, body: dict, param: str, fragment: str,
             path: str = "/chat/completions") -> dict:
    upstream.state.reset()
    resp = httpx.post(gw.v1 + path, json=body)
    assert resp.status_code == 400, resp.text
    err = resp.json()["error"]
    assert err["type"] == "invalid_request_error" and err["code"] == "invalid_value", err
    assert err["param"] == param, err
    assert err["message"].startswith(f"{param}: ") and fragment in err["message"], err
    assert upstream.state.requests == [], "a refused request reached the backend"
    return err


def _forwarded(gw: Gateway, upstream: RunningServer, body: dict, path: str = "/chat/completions") -> dict:
    upstream.state.reset()
    resp = httpx.post(gw.v1 + path, json=body)
    assert resp.status_code == 200, resp.text
    return upstream.state.last_body


@pytest.mark.parametrize("part, param, fragment", [
    ({"type": "image_url", "image_url": "https://x/y.png"}, "image_url",
     "an 'image_url' part needs an 'image_url' object such as {\"url\": \"...\"}, not 'https://x/y.png'"),
    ({"type": "image_url"}, "image_url", "not None"),
    ({"type": "image_url", "image_url": {"url": 5}}, "image_url.url", "needs a string 'url'"),
    ({"type": "input_audio", "input_audio": {"data": "UklGRg=="}}, "input_audio.format", "needs a string 'format'"),
    ({"type": "file", "file": "file-1"}, "file", "a 'file' part needs a 'file' object"),
    ({"type": "video_url", "video_url": {}}, "video_url.url", "needs a string 'url'"),
])
def test_media_parts_without_their_payload_are_refused(gateway, upstream, part, param, fragment):
    _refused(gateway, upstream, {"messages": [{"role": "user", "content": [part]}]},
             f"messages.0.content.0.{param}", fragment)


@pytest.mark.parametrize("messages, param, fragment", [
    ([USER, {"role": "assistant", "content": "ok"}, {"role": "user", "content": [{"type": "bogus", "x": 1}]}],
     "messages.2.content.0.type", "unknown content part type 'bogus' in a 'user' message"),
    ([{"role": "user", "content": [{"type": "text", "text": "a"}, {"text": "b"}]}],
     "messages.0.content.1.type", "needs a string 'type'"),
    ([{"role": "user", "content": [{"type": None, "text": "b"}]}], "messages.0.content.0.type", "string 'type'"),
    ([{"role": "system", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}, USER],
     "messages.0.content.0.type", "in a 'system' message (expected 'text')"),
    ([{"role": "developer", "content": [{"type": "refusal", "refusal": "no"}]}, USER],
     "messages.0.content.0.type", "'refusal' in a 'developer' message"),
    ([{"role": "user", "content": [{"type": "refusal", "refusal": "no"}]}],
     "messages.0.content.0.type", "'refusal' in a 'user' message"),
    ([USER, {"role": "assistant", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}],
     "messages.1.content.0.type", "(expected 'text', 'refusal', 'thinking')"),
    ([USER, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": [{"type": "input_audio", "input_audio": {}}]}],
     "messages.2.content.0.type", "in a 'tool' message"),
    ([{"role": "user", "content": [{"type": "text", "text": ["a"]}]}], "messages.0.content.0.text",
     "needs a string 'text'"),
    ([{"role": "user", "content": [{"type": "text", "text": "a"}, 7]}], "messages.0.content.1",
     "must be an object"),
])
def test_content_parts_of_a_type_the_role_does_not_take_are_refused(gateway, upstream, messages, param, fragment):
    _refused(gateway, upstream, {"messages": messages}, param, fragment)


@pytest.mark.parametrize("messages, param", [
    ([{"role": "user", "content": []}], "messages.0.content"),
    ([{"role": "system", "content": []}, USER], "messages.0.content"),
    ([USER, {"role": "assistant", "content": [], "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]}],
     "messages.1.content"),
])
def test_an_empty_content_array_is_refused(gateway, upstream, messages, param):
    """OpenAI's spec gives every role's content array ``minItems: 1``."""
    _refused(gateway, upstream, {"messages": messages}, param,
             "must not be an empty array; send a string or at least one content part")


def test_every_part_type_a_role_takes_reaches_the_backend(gateway, upstream):
    """OpenAI's part types per role, and vLLM's media parts (video, audio URLs) for users."""
    user_parts = [{"type": "text", "text": "describe"},
                  {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
                  {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
                  {"type": "file", "file": {"file_id": "file-1"}},
                  {"type": "video_url", "video_url": {"url": "https://example.com/v.mp4"}},
                  {"type": "audio_url", "audio_url": {"url": "https://example.com/a.wav"}}]
    messages = [{"role": "system", "content": [{"type": "text", "text": "be brief"}]},
                {"role": "user", "content": user_parts},
                {"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "refusal", "refusal": "b"}]},
                {"role": "user", "content": "and?"}]
    sent = _forwarded(gateway, upstream, {"messages": messages})
    assert sent["messages"][1]["content"] == user_parts
    assert sent["messages"][2]["content"][1] == {"type": "refusal", "refusal": "b"}


@pytest.mark.parametrize("tools, param, fragment", [
    (["get_weather"], "tools.0", "valid dictionary"),
    ([{"type": "retrieval"}], "tools.0.type", "'function' or 'custom', not 'retrieval'"),
    ([FN, {"type": "code_interpreter"}], "tools.1.type", "not 'code_interpreter'"),
    ([{"type": "function", "function": "get_weather"}], "tools.0.function", "needs a 'function' object"),
    ([{"type": "function", "function": {"name": ""}}], "tools.0.function.name", "non-empty string 'name'"),
    ([{"type": "function", "function": {"name": "get weather"}}], "tools.0.function.name",
     "'get weather' is not a valid function name"),
    ([{"type": "function", "function": {"name": "math.add"}}], "tools.0.function.name", "not a valid function name"),
    ([{"type": "function", "function": {"name": "f" * 65}}], "tools.0.function.name", "at most 64 characters"),
    ([FN, {"type": "function", "function": {"name": "get_weather", "description": "again"}}],
     "tools.1.function.name", "'get_weather' is also the name of tool 0"),
    ([FN, {"type": "custom", "custom": {"name": "get_weather"}}], "tools.1.custom.name", "must be unique"),
    ([{"type": "custom", "custom": {}}], "tools.0.custom.name", "non-empty string 'name'"),
    ([{"type": "function", "function": {"name": "f", "parameters": []}}], "tools.0.function.parameters",
     "must be a JSON Schema object such as {\"type\": \"object\", \"properties\": {...}}, not []"),
    ([FN, {"type": "function", "function": {"name": "g", "parameters": "x" * 100}}], "tools.1.function.parameters",
     "not 'xxxxxxxx"),
])
def test_malformed_tools_are_refused(gateway, upstream, tools, param, fragment):
    _refused(gateway, upstream, {"messages": [USER], "tools": tools}, param, fragment)


@pytest.mark.parametrize("choice, fragment", [
    ({"type": "function", "function": {"name": "get_time"}}, "names the function 'get_time', which is not in 'tools'"),
    ({"type": "custom", "custom": {"name": "get_weather"}}, "names the custom 'get_weather'"),
    ({"type": "tool", "function": {"name": "get_weather"}}, "'type' must be 'function', 'custom' or 'allowed_tools'"),
    ({"function": {"name": "get_weather"}}, "not None"),
    ({"type": "allowed_tools", "allowed_tools": {"mode": "any", "tools": [FN]}}, "'auto' or 'required'"),
    ({"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": [
        {"type": "function", "function": {"name": "get_time"}}]}}, "'get_time', which is not in 'tools'"),
])
def test_a_tool_choice_naming_no_offered_tool_is_refused(gateway, upstream, choice, fragment):
    _refused(gateway, upstream, {"messages": [USER], "tools": [FN], "tool_choice": choice}, "tool_choice", fragment)


def test_valid_tools_and_choices_reach_the_backend(gateway, upstream):
    custom = {"type": "custom", "custom": {"name": "run-sql_2", "format": {"type": "text"}}}
    choices = [{"type": "function", "function": {"name": "get_weather"}},
               {"type": "custom", "custom": {"name": "run-sql_2"}},
               {"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": [
                   {"type": "function", "function": {"name": "get_weather"}}]}},
               "required", "auto", "none"]
    for choice in choices:
        sent = _forwarded(gateway, upstream, {"messages": [USER], "tools": [FN, custom], "tool_choice": choice})
        assert sent["tool_choice"] == choice
        assert sorted(t["type"] for t in sent["tools"]) == ["custom", "function"]


@pytest.mark.parametrize("message, param, fragment", [
    ({"role": "user", "content": "x", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
     "messages.0.tool_calls", "only assistant messages carry 'tool_calls', not a 'user' message"),
    ({"role": "tool", "tool_call_id": "c1", "content": "x", "tool_calls": []}, "messages.0.tool_calls",
     "not a 'tool' message"),
    ({"role": "assistant", "content": None, "tool_calls": "f()"}, "messages.0.tool_calls", "valid list"),
    ({"role": "assistant", "content": None, "tool_calls": [{"type": "function", "function": {
        "name": "f", "arguments": "{}"}}]}, "messages.0.tool_calls.0.id", "string 'id'"),
    ({"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "fn", "function": {
        "name": "f", "arguments": "{}"}}]}, "messages.0.tool_calls.0.type", "'function' or 'custom', not 'fn'"),
    ({"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
        "name": "f", "arguments": {"city": "Paris"}}}]}, "messages.0.tool_calls.0.function.arguments",
     "string 'arguments'"),
    ({"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function"}]},
     "messages.0.tool_calls.0.function", "needs a 'function' object"),
    ({"role": "tool", "content": "sunny"}, "messages.0", "needs 'tool_call_id'"),
    ({"role": "assistant", "content": None, "tool_calls": []}, "messages.0",
     "an 'assistant' message needs 'content' (or non-empty 'tool_calls'"),
])
def test_tool_calls_only_on_assistant_messages_and_well_formed(gateway, upstream, message, param, fragment):
    messages = [USER, message] if message["role"] != "user" else [message]
    err = _refused(gateway, upstream, {"messages": messages}, param.replace("messages.0", f"messages.{len(messages) - 1}"),
                   fragment)
    assert "Traceback" not in err["message"]


def test_an_assistant_audio_reply_without_content_reaches_the_backend(gateway, upstream):
    """The OpenAI audio guide's multi-turn form: the earlier spoken answer is sent back as
    ``{"role": "assistant", "audio": {"id": ...}}`` with no content (openai-python's
    ChatCompletionAssistantMessageParam.audio)."""
    messages = [USER, {"role": "assistant", "audio": {"id": "audio_abc123"}}, USER]
    assert _forwarded(gateway, upstream, {"messages": messages})["messages"] == messages
    _refused(gateway, upstream, {"messages": [USER, {"role": "assistant", "audio": {}}]}, "messages.1",
             "needs 'content'")


def test_a_tool_round_trip_reaches_the_backend(gateway, upstream):
    messages = [USER, {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}},
                    {"id": "c2", "type": "custom", "custom": {"name": "sql", "input": "SELECT 1"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "sunny"}]},
                {"role": "tool", "tool_call_id": "c2", "content": "1"}]
    sent = _forwarded(gateway, upstream, {"messages": messages})
    assert sent["messages"][1]["tool_calls"] == messages[1]["tool_calls"]


@pytest.mark.parametrize("field, value, param, fragment", [
    ("parallel_tool_calls", "true", "parallel_tool_calls", "valid boolean"),
    ("parallel_tool_calls", 1, "parallel_tool_calls", "valid boolean"),
    ("store", "yes", "store", "valid boolean"),
    ("metadata", ["a"], "metadata", "valid dictionary"),
    ("metadata", {"team": 7}, "metadata.team", "valid string"),
    ("metadata", {f"k{i}": "v" for i in range(17)}, "metadata", "17 keys; at most 16"),
    ("metadata", {"k" * 65: "v"}, "metadata", "longer than 64 characters"),
    ("metadata", {"note": "v" * 513}, "metadata.note", "513 characters long; at most 512"),
    ("reasoning_effort", "extreme", "reasoning_effort", "'minimal'"),
    ("reasoning_effort", "High", "reasoning_effort", "'high'"),
    ("reasoning_effort", 2, "reasoning_effort", ""),
    ("service_tier", 1, "service_tier", "valid string"),
    ("modalities", ["smell"], "modalities.0", "unknown modality 'smell' (expected 'text', 'audio', 'image')"),
    ("modalities", ["text", "s" * 1000], "modalities.1", "unknown modality 'ssss"),
    ("modalities", "text", "modalities", "valid list"),
    ("response_format", {"type": "json_schema", "json_schema": {"name": "x", "schema": "s"}},
     "response_format.json_schema.schema", "must be a JSON Schema object such as {\"type\": \"object\""),
    ("response_format", {"type": "json_schema", "json_schema": {"name": "x", "schema": ["s"] * 50}},
     "response_format.json_schema.schema", "...}}, not ['s', 's', "),
])
def test_chat_options_of_the_wrong_type_are_refused(gateway, upstream, field, value, param, fragment):
    _refused(gateway, upstream, {"messages": [USER], field: value}, param, fragment)


def test_chat_options_and_vllm_extensions_reach_the_backend_unchanged(gateway, upstream):
    """Typed options within the rules, and fields mixroute does not know (vLLM's sampling and
    guided decoding), pass through as sent; ``stop`` is not held to OpenAI's 4 (vLLM takes more)."""
    extras = {"parallel_tool_calls": False, "store": True, "metadata": {f"k{i}": "v" * 512 for i in range(16)},
              "reasoning_effort": "none", "service_tier": "flex", "top_k": 20, "repetition_penalty": 1.1,
              "guided_json": {"type": "object"}, "stop": ["a", "b", "c", "d", "e"], "tools": [FN],
              "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}},
              "modalities": ["text", "audio"]}
    sent = _forwarded(gateway, upstream, {"messages": [USER], **extras})
    assert {k: sent.get(k) for k in extras} == extras
    assert _forwarded(gateway, upstream, {"messages": [USER], "modalities": ["image", "text"]})["modalities"] == [
        "image", "text"]  # LiteLLM's for Gemini image output
    for effort in ("minimal", "low", "medium", "high", "xhigh", "max"):
        assert _forwarded(gateway, upstream, {"messages": [USER], "reasoning_effort": effort})["reasoning_effort"] == effort


@pytest.mark.parametrize("extra, param, fragment", [
    ({"functions": 5}, "functions", "valid list"),
    ({"functions": [{"name": "get weather"}]}, "functions.0.name", "not 'get weather'"),
    ({"functions": [{"description": "no name"}]}, "functions.0.name", "not None"),
    ({"functions": [{"name": "f"}], "function_call": {"name": "g"}}, "function_call",
     "names the function 'g', which is not in 'functions'"),
    ({"function_call": "maybe"}, "function_call", "'none' or 'auto'"),
    ({"functions": [{"name": "f", "parameters": [1]}]}, "functions.0.parameters", "must be a JSON Schema object"),
])
def test_legacy_function_fields_are_checked(gateway, upstream, extra, param, fragment):
    _refused(gateway, upstream, {"messages": [USER], **extra}, param, fragment)


def test_legacy_functions_within_the_rules_reach_the_backend(gateway, upstream):
    extra = {"functions": [{"name": "get_weather", "parameters": {"type": "object"}}],
             "function_call": {"name": "get_weather"}}
    sent = _forwarded(gateway, upstream, {"messages": [USER], **extra})
    assert {k: sent.get(k) for k in extra} == extra
    result = {"role": "function", "name": "get_weather", "content": "sunny"}
    assert _forwarded(gateway, upstream, {"messages": [USER, result]})["messages"][1] == result


def test_a_function_message_without_name_is_refused(gateway, upstream):
    """openai-python's ChatCompletionFunctionMessageParam requires ``name``."""
    _refused(gateway, upstream, {"messages": [USER, {"role": "function", "content": "sunny"}]}, "messages.1.name",
             "a 'function' message needs the 'name' of the function whose result it carries")


@pytest.mark.parametrize("prompt", [[1, 2, 3], [[1, 2], [3]]])
def test_token_id_prompts_are_refused_with_why(gateway, upstream, prompt):
    _refused(gateway, upstream, {"prompt": prompt}, "prompt", "token-id prompts are not supported",
             path="/completions")


@pytest.mark.parametrize("extra, param, fragment", [
    ({"suffix": 5}, "suffix", "valid string"),
    ({"echo": "true"}, "echo", "valid boolean"),
    ({"best_of": 0}, "best_of", "greater than or equal to 1"),
    ({"best_of": 1.5}, "best_of", "valid integer"),
    ({"best_of": 2, "n": 3}, "best_of", "at least 'n' (3), not 2"),
    ({"best_of": 2, "stream": True}, "best_of", "cannot be more than 1 with 'stream': true"),
])
def test_legacy_completions_options_are_checked(gateway, upstream, extra, param, fragment):
    _refused(gateway, upstream, {"prompt": "Say hi", **extra}, param, fragment, path="/completions")


def test_legacy_completions_options_within_the_rules_reach_the_backend(gateway, upstream):
    for extra in ({"suffix": "!", "echo": True, "best_of": 3, "n": 2}, {"suffix": None, "best_of": 2, "n": 2},
                  {"best_of": 1, "stream": True}, {"echo": False, "stream": True}):
        upstream.state.reset()
        resp = httpx.post(gateway.v1 + "/completions", json={"prompt": "Say hi", **extra})
        assert resp.status_code == 200, (extra, resp.text)
        if extra.get("stream"):
            assert resp.text.rstrip().endswith("data: [DONE]")
        sent = upstream.state.last_body
        assert {k: sent.get(k) for k in extra} == extra
