"""The Messages door builds the message of a plain text answer itself
(:func:`gateway.doors.messages_input._plain_text_message`) instead of litellm's
translation: held here to litellm's output for such answers, and to stepping aside for
every other answer."""

from __future__ import annotations

import pytest

from backends.hosted.sdk import load_litellm
from gateway.doors.messages_input import _adapter, _plain_text_message, from_chat


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
