"""The typed canonical request: the pydantic models of an OpenAI Chat Completions and a legacy
Completions body, which every door's request becomes before the router decides on it.

Each model checks the fields mixroute relies on and the OpenAI API's rules for the fields it
declares (typed options here; content parts, tools and tool calls by
:mod:`backends.request_rules`), and lets every other field through (``extra="allow"``) so it
reaches the backend unchanged. :func:`gateway.schemas.validate` turns a failed validation
into the client's error.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from backends.request_rules import (Invalid, article, check_function_call, check_functions, check_modalities,
                                    check_parts, check_schema_object, check_tool_calls, check_tool_choice,
                                    check_tools)

Role = Literal["system", "developer", "user", "assistant", "tool", "function"]


class Message(BaseModel):
    """One chat message. ``content`` may be null only for an assistant message that
    carries ``tool_calls`` (or a legacy ``function_call``); only assistant messages carry
    ``tool_calls``; a ``tool`` message needs ``tool_call_id``, a legacy ``function`` message
    ``name``; content parts must be of a type the role takes (the OpenAI API's rules)."""

    model_config = ConfigDict(extra="allow", strict=True)

    role: Role
    content: str | list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    name: str | None = None

    @field_validator("content", mode="before")
    @classmethod
    def _parts(cls, content: Any, info: ValidationInfo) -> Any:
        # A field validator (role is declared first), so parts are checked against the role.
        if isinstance(content, list):
            check_parts(content, info.data.get("role"))
        return content

    @field_validator("tool_calls")
    @classmethod
    def _tool_calls(cls, calls: Any, info: ValidationInfo) -> Any:
        if calls is not None and info.data.get("role") not in (None, "assistant"):
            raise ValueError(f"only assistant messages carry 'tool_calls', not a '{info.data['role']}' message")
        check_tool_calls(calls or [])
        return calls

    @model_validator(mode="after")
    def _rules(self) -> "Message":
        extra = self.model_extra or {}
        # An assistant message may stand for its tool calls or, in the OpenAI audio guide's
        # multi-turn form, for an earlier spoken answer ({"audio": {"id": ...}}) alone.
        audio = extra.get("audio")
        stands_in = self.tool_calls or extra.get("function_call") or (
            isinstance(audio, dict) and isinstance(audio.get("id"), str))
        if self.content is None and not (self.role == "assistant" and stands_in):
            also = " (or non-empty 'tool_calls', or 'audio' with an 'id')" if self.role == "assistant" else ""
            raise ValueError(f"{article(self.role)} '{self.role}' message needs 'content'{also}")
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a 'tool' message needs 'tool_call_id'")
        if self.role == "function" and self.name is None:
            # The legacy function message: openai-python's ChatCompletionFunctionMessageParam.
            raise Invalid("a 'function' message needs the 'name' of the function whose result it carries", "name")
        return self


class ResponseFormat(BaseModel):
    """``response_format``: ``text``, ``json_object`` or ``json_schema`` (with a ``json_schema``
    object naming the schema, whose ``schema``, if given, is an object: OpenAI's
    ``ResponseFormatJsonSchemaSchema``)."""

    model_config = ConfigDict(extra="allow", strict=True)

    type: Literal["text", "json_object", "json_schema"]
    json_schema: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _schema(self) -> "ResponseFormat":
        if self.type == "json_schema" and not (self.json_schema and isinstance(self.json_schema.get("name"), str)):
            raise ValueError("type 'json_schema' needs a 'json_schema' object with a 'name'")
        check_schema_object((self.json_schema or {}).get("schema"), "json_schema", "schema")
        return self


class StreamOptions(BaseModel):
    """``stream_options``: ``include_usage`` must be a boolean; other keys pass through."""

    model_config = ConfigDict(extra="allow", strict=True)

    include_usage: bool | None = None


class _Common(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)

    model: str | None = Field(default=None, min_length=1)
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    n: int | None = Field(default=None, ge=1, le=128)
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    stop: str | list[str] | None = None
    seed: int | None = None
    user: str | None = None
    # Bounds of the OpenAI API reference (vLLM accepts the same ranges by default).
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    logit_bias: dict[str, float] | None = None

    @field_validator("logit_bias")
    @classmethod
    def _logit_bias(cls, bias: Any) -> Any:
        # Keys are token ids (JSON object keys are strings), values a bias in [-100, 100].
        for key, value in (bias or {}).items():
            if not (key.isascii() and key.isdigit() and int(key) < 2**31):
                raise ValueError(f"keys must be token ids (non-negative integers as strings), not {key[:40]!r}")
            if not -100 <= value <= 100:
                raise ValueError(f"the bias of token {key} must be between -100 and 100, not {value}")
        return bias

    @field_validator("stream_options")
    @classmethod
    def _stream_options(cls, options: Any, info: ValidationInfo) -> Any:
        # The OpenAI API and vLLM both refuse stream_options on a non-streaming request.
        if options is not None and not info.data.get("stream"):
            raise ValueError("only allowed when 'stream' is true")
        return options


class ChatCompletionRequest(_Common):
    """``POST /v1/chat/completions`` body (fields checked here; others pass through)."""

    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    response_format: ResponseFormat | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    parallel_tool_calls: bool | None = None
    # The legacy function-calling fields (deprecated by tools, still accepted by the API).
    functions: list[dict[str, Any]] | None = None
    function_call: Literal["none", "auto"] | dict[str, Any] | None = None
    store: bool | None = None
    metadata: dict[str, str] | None = None
    # The values of openai-python 3.51's ReasoningEffort; case matters, as in the API.
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"] | None = None
    # Only its type: providers name their tiers differently (OpenAI, Groq...).
    service_tier: str | None = None
    modalities: list[str] | None = None
    # Not an OpenAI chat field, but vLLM's chat endpoint took it: checked as on /v1/completions.
    best_of: int | None = Field(default=None, ge=1)

    @field_validator("modalities")
    @classmethod
    def _modalities(cls, modalities: Any) -> Any:
        check_modalities(modalities or [])
        return modalities

    @field_validator("top_logprobs")
    @classmethod
    def _top_logprobs(cls, top: Any, info: ValidationInfo) -> Any:
        # The OpenAI API: top_logprobs needs logprobs set to true.
        if top is not None and not info.data.get("logprobs"):
            raise ValueError("needs 'logprobs': true")
        return top

    @field_validator("functions")
    @classmethod
    def _functions(cls, functions: Any) -> Any:
        check_functions(functions or [])
        return functions

    @field_validator("function_call")
    @classmethod
    def _function_call(cls, call: Any, info: ValidationInfo) -> Any:
        # As tool_choice without tools: the OpenAI API refuses function_call without functions.
        if call is not None and not info.data.get("functions"):
            raise ValueError("is set but no 'functions' are given")
        if isinstance(call, dict):
            check_function_call(call, info.data.get("functions") or [])
        return call

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, metadata: Any) -> Any:
        # The OpenAI API reference: at most 16 pairs, keys up to 64 characters, values up to 512.
        if metadata and len(metadata) > 16:
            raise ValueError(f"has {len(metadata)} keys; at most 16 are allowed")
        for key, value in (metadata or {}).items():
            if len(key) > 64:
                raise ValueError(f"key {key[:40]!r}... is longer than 64 characters")
            if len(value) > 512:
                raise Invalid(f"is {len(value)} characters long; at most 512 are allowed", key)
        return metadata

    @field_validator("tools")
    @classmethod
    def _tools(cls, tools: Any) -> Any:
        check_tools(tools or [])
        return tools

    @field_validator("tool_choice")
    @classmethod
    def _tool_choice(cls, choice: Any, info: ValidationInfo) -> Any:
        # A field validator (tools is declared first), so the error's param is tool_choice.
        if choice in (None, "none", "auto"):
            return choice
        tools = info.data.get("tools")
        if not tools:
            raise ValueError("is set but no 'tools' are given")
        if isinstance(choice, dict):  # else "required"
            check_tool_choice(choice, tools)
        return choice



#: Most prompts in one legacy completions request (the OpenAI API's limit).
MAX_PROMPTS = 2048


class CompletionRequest(_Common):
    """``POST /v1/completions`` body."""

    prompt: str | list[str] = Field(min_length=1)
    # The legacy API's logprobs is a count of top tokens (OpenAI: at most 5; vLLM: 20).
    logprobs: int | None = Field(default=None, ge=0, le=20)
    suffix: str | None = None
    echo: bool | None = None
    best_of: int | None = Field(default=None, ge=1)

    @field_validator("prompt")
    @classmethod
    def _prompt_count(cls, prompt: Any) -> Any:
        # The OpenAI API takes at most 2048 prompts in one request; each is answered n times.
        if isinstance(prompt, list) and len(prompt) > MAX_PROMPTS:
            raise ValueError(f"has {len(prompt)} prompts; at most {MAX_PROMPTS} are allowed in one request")
        return prompt

    @field_validator("prompt", mode="before")
    @classmethod
    def _text_prompt(cls, prompt: Any) -> Any:
        # The OpenAI API also takes token ids (a list of ints, or of such lists); the router
        # reads the prompt's text (classifier, rewriter, token estimate), so they are refused.
        if isinstance(prompt, list) and prompt and all(
                isinstance(p, int) or (isinstance(p, list) and p and all(isinstance(t, int) for t in p))
                for p in prompt):
            raise ValueError("token-id prompts are not supported (the router reads the prompt's text); "
                             "send the prompt as a string or a list of strings")
        return prompt

    @field_validator("best_of")
    @classmethod
    def _best_of(cls, best_of: Any, info: ValidationInfo) -> Any:
        # The OpenAI API: best_of candidates are generated to return n of them, and cannot be
        # streamed (the best is only known at the end).
        n = info.data.get("n")
        if best_of is not None and n is not None and best_of < n:
            raise ValueError(f"must be at least 'n' ({n}), not {best_of}")
        if best_of is not None and best_of > 1 and info.data.get("stream"):
            raise ValueError("cannot be more than 1 with 'stream': true")
        return best_of
