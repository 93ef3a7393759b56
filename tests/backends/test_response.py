"""The typed canonical answer (:mod:`backends.response`): a backend's chat answer and stream
chunks read once, leniently, with the backend's report beside them."""

from __future__ import annotations

from backends.call import CallReport
from backends.response import Answer, Delta, ToolCall, ToolCallDelta, Usage

CHAT = {"id": "c", "object": "chat.completion", "model": "m-real", "choices": [
    {"index": 0, "finish_reason": "stop", "stop_reason": "END", "message": {
        "role": "assistant", "content": "Hi.", "reasoning_content": "Think.", "refusal": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]}},
    {"index": 1, "finish_reason": "stop", "message": {"role": "assistant", "content": "Other."}}],
    "usage": {"prompt_tokens": 100, "completion_tokens": 9, "total_tokens": 109,
              "prompt_tokens_details": {"cached_tokens": 30}, "completion_tokens_details": {"reasoning_tokens": 4}}}


def test_an_answer_is_its_first_choice_with_the_backends_report():
    answer = Answer.from_chat(CHAT, CallReport(cache_write_tokens=50))
    assert (answer.text, answer.reasoning, answer.refusal) == ("Hi.", "Think.", "")
    assert answer.tool_calls == (ToolCall("call_1", "f", '{"a": 1}'),)
    assert (answer.finish_reason, answer.stop_reason, answer.model) == ("stop", "END", "m-real")
    assert answer.usage == Usage(prompt_tokens=100, cached_tokens=30, cache_write_tokens=50, output_tokens=9,
                                 reasoning_tokens=4, total_tokens=109)
    assert answer.usage.uncached_tokens == 20  # neither read nor written: Anthropic's input_tokens


def test_missing_and_null_fields_read_as_empty():
    answer = Answer.from_chat({"choices": [{"message": {"content": None, "tool_calls": None}}], "usage": None})
    assert answer == Answer()
    assert Answer.from_chat({}) == Answer()
    assert Usage.from_chat({"prompt_tokens": 3, "completion_tokens": 2, "cost_usd": 0.5}) == Usage(
        prompt_tokens=3, output_tokens=2, total_tokens=5, cost_usd=0.5)
    assert Answer.from_chat({"choices": [{"message": {"reasoning": "newer vLLM"}}]}).reasoning == "newer vLLM"


def test_a_delta_is_what_a_chunk_adds_to_the_first_choice():
    chunk = {"model": "m", "choices": [
        {"index": 1, "delta": {"content": "not this one"}},
        {"index": 0, "finish_reason": None, "delta": {"content": "He", "reasoning": "so", "tool_calls": [
            {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": ""}},
            {"index": 1, "function": {"arguments": '{"a"'}}]}}]}
    assert Delta.from_chunk(chunk) == Delta(text="He", reasoning="so", model="m", tool_calls=(
        ToolCallDelta(0, "call_1", "f", ""), ToolCallDelta(1, None, None, '{"a"')))
    usage_only = {"model": "m", "choices": [], "usage": {"prompt_tokens": 1}}
    assert Delta.from_chunk(usage_only) == Delta(model="m")
    last = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop", "stop_reason": "END"}]}
    assert (Delta.from_chunk(last).finish_reason, Delta.from_chunk(last).stop_reason) == ("stop", "END")
