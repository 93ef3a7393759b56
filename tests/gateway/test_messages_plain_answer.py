"""The Messages door builds the message of a plain text answer itself
(:func:`gateway.doors.messages_input._plain_text_message`) instead of litellm's
translation: held here to litellm's output for such answers, and to stepping aside for
every other answer."""

from __future__ import annotations

import pytest

from backends.hosted.sdk import load_litellm
from gateway.doors.messages_input import _adapter, _plain_chat, _plain_text_message, from_chat, to_chat


def _answer(message: dict, finish_reason: str = "stop", **choice) -> dict:
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 1700000000, "model": "m-1",
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason, **choice}],
            "usage": {"prompt_tokens": 12, "completion_tokens": 8, "total_tokens": 20}}


def _litellm(response: dict) -> dict:
    out = dict(_adapter().translate_openai_response_to_anthropic(load_litellm().ModelResponse(**response)))
    out.pop("usage"), out.pop("stop_details")  # the door sets the one and drops the other
    return out


@pytest.mark.parametrize("response", [
    _answer({"role": "assistant", "content": "Hello there."}),
    _answer({"role": "assistant", "content": "cut sh"}, "length"),
    _answer({"role": "assistant", "content": " spaced\n", "tool_calls": None, "refusal": None}, logprobs=None),
    {**_answer({"role": "assistant", "content": "x"}), "model": ""},
])
def test_a_plain_text_answer_is_what_litellm_makes_of_it(response: dict) -> None:
    assert _plain_text_message(response) == _litellm(response)
    assert from_chat(response) == _litellm(response)


@pytest.mark.parametrize("response", [
    _answer({"role": "assistant", "content": ""}),
    _answer({"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}, "tool_calls"),
    _answer({"role": "assistant", "content": "hi", "reasoning_content": "thought"}),
    _answer({"role": "assistant", "content": "hi", "refusal": "no"}),
    _answer({"role": "assistant", "content": "hi", "provider_specific_fields": {"thinking_blocks": []}}),
    _answer({"role": "assistant", "content": "hi"}, "content_filter"),
    _answer({"role": "assistant", "content": [{"type": "text", "text": "hi"}]}),
    _answer({"role": "assistant", "content": "hi"}, provider_specific_fields={"x": 1}),
    {**_answer({"role": "assistant", "content": "hi"}), "choices": []},
    {**_answer({"role": "assistant", "content": "hi"}), "choices": [{"index": 0, "message": {"content": "a"},
                                                                      "finish_reason": "stop"}] * 2},
])
def test_any_other_answer_is_left_to_litellm(response: dict) -> None:
    assert _plain_text_message(response) is None


def _litellm_request(raw: dict) -> dict:
    body, _ = _adapter().translate_anthropic_to_openai(raw, custom_llm_provider="openai")
    body = {k: v for k, v in body.items() if v is not None}
    body["messages"] = [{k: v for k, v in m.items() if v is not None} for m in body["messages"]]
    return body


PLAIN = [
    {"model": "bench", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]},
    {"model": "gpt-5", "max_tokens": 16, "system": "be brief", "temperature": 0.5, "top_p": 0.9, "messages": [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}, {"role": "user", "content": "x"}]},
    {"model": "o3", "max_tokens": 1, "temperature": None, "messages": [{"role": "user", "content": " a\n"}]},
    {"model": "claude-3-5-sonnet-20240620", "max_tokens": 9, "system": "s", "messages": [
        {"role": "assistant", "content": "prefill"}]},
]


@pytest.mark.parametrize("raw", PLAIN)
def test_a_plain_text_request_is_what_litellm_makes_of_it(raw: dict) -> None:
    expected = _litellm_request({k: v for k, v in raw.items() if v is not None})
    assert _plain_chat(raw) == expected
    assert to_chat({**raw, "stream": True}) == ({**expected, "stream": True}, {})


@pytest.mark.parametrize("raw", [
    {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": ""}]},
    {"model": "m", "max_tokens": 16, "system": "", "messages": [{"role": "user", "content": "hi"}]},
    {"model": "m", "max_tokens": 16, "system": [{"type": "text", "text": "s"}], "messages": [
        {"role": "user", "content": "hi"}]},
    {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]},
    {"model": "m", "max_tokens": 16, "stop_sequences": ["x"], "messages": [{"role": "user", "content": "hi"}]},
    {"model": "m", "max_tokens": 16, "top_k": 3, "messages": [{"role": "user", "content": "hi"}]},
    {"model": "m", "max_tokens": 16, "metadata": {"user_id": "u"}, "messages": [{"role": "user", "content": "hi"}]},
    {"model": "m", "max_tokens": 16, "tools": [], "messages": [{"role": "user", "content": "hi"}]},
    {"model": "m", "max_tokens": 16, "thinking": {"type": "disabled"}, "messages": [
        {"role": "user", "content": "hi"}]},
    {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "hi", "extra": 1}]},
    {"model": "m", "max_tokens": 16, "messages": []},
])
def test_any_other_request_is_left_to_litellm(raw: dict) -> None:
    assert _plain_chat(raw) is None
