"""The typed canonical request on the floor (:mod:`backends.request`): OpenAI chat and legacy
completions bodies parse into typed models that keep the client's unknown fields for
pass-through and refuse what the OpenAI API refuses, naming the spot."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from backends.request import ChatCompletionRequest, CompletionRequest
from backends.request_rules import Invalid


def test_a_chat_body_parses_into_typed_fields_and_keeps_unknown_ones():
    body = {"model": "auto", "messages": [{"role": "system", "content": "Be brief."},
                                          {"role": "user", "content": [{"type": "text", "text": "hi"}]}],
            "max_completion_tokens": 5, "reasoning_effort": "low", "top_k": 7, "x_vendor": {"a": 1}}
    req = ChatCompletionRequest.model_validate(body)
    assert [m.role for m in req.messages] == ["system", "user"]
    assert req.max_completion_tokens == 5 and req.reasoning_effort == "low"
    assert req.model_extra == {"top_k": 7, "x_vendor": {"a": 1}}
    assert req.model_dump(exclude_unset=True) == body


def test_a_legacy_completion_parses():
    req = CompletionRequest.model_validate({"prompt": ["a", "b"], "n": 2, "best_of": 3})
    assert req.prompt == ["a", "b"] and req.best_of == 3


@pytest.mark.parametrize("body,where", [
    ({"messages": [{"role": "user", "content": [{"type": "refusal", "refusal": "no"}]}]}, ("messages", 0, "content")),
    ({"messages": [{"role": "tool", "content": "x"}]}, ("messages", 0)),
    ({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"}, ("tool_choice",)),
])
def test_what_the_api_refuses_is_refused_at_its_field(body, where):
    with pytest.raises(ValidationError) as info:
        ChatCompletionRequest.model_validate(body)
    assert info.value.errors()[0]["loc"][:len(where)] == where


def test_rule_errors_name_the_spot_below_the_field():
    with pytest.raises(ValidationError) as info:
        ChatCompletionRequest.model_validate({"messages": [{"role": "user", "content": [{"type": "video"}]}]})
    error = info.value.errors()[0]["ctx"]["error"]
    assert isinstance(error, Invalid) and error.at[0] == 0
