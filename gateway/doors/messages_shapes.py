"""The Anthropic Messages request, as pydantic models: what the door validates a body with
and what ``/v1/messages`` declares in its OpenAPI schema.

Field reference: https://docs.anthropic.com/en/api/messages. Models take unknown keys
(``extra="allow"``) so that newer Anthropic fields pass through; the fields of OpenAI's
Chat Completions that the Messages API does not have are refused by
:func:`gateway.doors.messages_input.check` before these models run.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator

_STRICT = ConfigDict(extra="allow", strict=True)


class CacheControl(BaseModel):
    model_config = _STRICT

    type: Literal["ephemeral"]
    ttl: Literal["5m", "1h"] | None = None


class _Block(BaseModel):
    model_config = _STRICT

    cache_control: CacheControl | None = None


class TextBlock(_Block):
    type: Literal["text"]
    text: str


class Base64ImageSource(BaseModel):
    model_config = _STRICT

    type: Literal["base64"]
    media_type: Literal["image/jpeg", "image/png", "image/gif", "image/webp"]
    data: str = Field(min_length=1)


class URLSource(BaseModel):
    model_config = _STRICT

    type: Literal["url"]
    url: str = Field(min_length=1)


class ImageBlock(_Block):
    """An image, inline (``base64``) or by ``url``; Anthropic's ``file`` source needs its Files
    API, which this gateway does not have."""

    type: Literal["image"]
    source: Annotated[Union[Base64ImageSource, URLSource], Field(discriminator="type")]


class Base64PDFSource(BaseModel):
    model_config = _STRICT

    type: Literal["base64"]
    media_type: Literal["application/pdf"]
    data: str = Field(min_length=1)


class PlainTextSource(BaseModel):
    model_config = _STRICT

    type: Literal["text"]
    media_type: Literal["text/plain"] | None = None
    data: str


class ContentSource(BaseModel):
    """A document given as text blocks (Anthropic's ``content`` source), read as its text."""

    model_config = _STRICT

    type: Literal["content"]
    content: str | list[TextBlock]


class DocumentBlock(_Block):
    type: Literal["document"]
    source: Annotated[Union[Base64PDFSource, PlainTextSource, ContentSource, URLSource], Field(discriminator="type")]
    title: str | None = None
    context: str | None = None


class ToolUseBlock(_Block):
    type: Literal["tool_use"]
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    input: dict[str, Any]


class ToolResultBlock(_Block):
    type: Literal["tool_result"]
    tool_use_id: str = Field(min_length=1)
    content: str | list[Annotated[Union[TextBlock, ImageBlock, DocumentBlock], Field(discriminator="type")]] | None = None
    is_error: bool | None = None


class ThinkingBlock(_Block):
    type: Literal["thinking"]
    thinking: str
    signature: str | None = None


class RedactedThinkingBlock(_Block):
    type: Literal["redacted_thinking"]
    data: str


Block = Annotated[Union[TextBlock, ImageBlock, DocumentBlock, ToolUseBlock, ToolResultBlock, ThinkingBlock,
                        RedactedThinkingBlock], Field(discriminator="type")]


class Message(BaseModel):
    model_config = _STRICT

    role: Literal["user", "assistant"]
    content: str | list[Block]


class InputSchema(BaseModel):
    """A tool's ``input_schema``: a JSON Schema whose ``type`` is ``object`` (Anthropic's
    ``InputSchema``); the rest of the schema is the client's and passes as sent."""

    model_config = _STRICT

    type: Literal["object"]
    properties: dict[str, Any] | None = None
    required: list[str] | None = None


class Tool(BaseModel):
    """A client tool (``type`` absent or ``custom``); Anthropic's server tools are refused
    by the door (no backend here runs them)."""

    model_config = _STRICT

    name: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,128}$")
    description: str | None = None
    input_schema: InputSchema
    type: Literal["custom"] | None = None
    cache_control: CacheControl | None = None


class ToolChoice(BaseModel):
    model_config = _STRICT

    type: Literal["auto", "any", "tool", "none"]
    name: str | None = Field(default=None, min_length=1)
    disable_parallel_tool_use: bool | None = None

    @model_validator(mode="after")
    def _named(self) -> "ToolChoice":
        if self.type == "tool" and self.name is None:
            raise ValueError("a tool_choice of type 'tool' needs the 'name' of the tool")
        return self


class Thinking(BaseModel):
    model_config = _STRICT

    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: int | None = Field(default=None, ge=1024)

    @model_validator(mode="after")
    def _budget(self) -> "Thinking":
        # Anthropic's API requires a budget for enabled thinking; refusing it here names the
        # field instead of relaying the provider's error after routing.
        if self.type == "enabled" and self.budget_tokens is None:
            raise ValueError("budget_tokens is required when type is 'enabled'")
        return self


class Metadata(BaseModel):
    model_config = _STRICT

    user_id: str | None = Field(default=None, max_length=256)


class MessagesRequest(BaseModel):
    """``POST /v1/messages``: ``model`` is a route or a backend, as on chat."""

    model_config = _STRICT

    model: str = Field(min_length=1)
    messages: list[Message] = Field(min_length=1)
    max_tokens: int = Field(ge=1)
    system: str | list[TextBlock] | None = None
    metadata: Metadata | None = None
    stop_sequences: list[str] | None = None
    stream: bool | None = None
    temperature: float | None = Field(default=None, ge=0, le=1)
    top_p: float | None = Field(default=None, ge=0, le=1)
    top_k: int | None = Field(default=None, ge=0)
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None
    service_tier: str | None = None


class CountTokensRequest(BaseModel):
    """``POST /v1/messages/count_tokens``: a Messages request without ``max_tokens``."""

    model_config = _STRICT

    model: str = Field(min_length=1)
    messages: list[Message] = Field(min_length=1)
    system: str | list[TextBlock] | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None


def request_body_schema(model: type[BaseModel]) -> dict:
    """An OpenAPI ``requestBody`` for ``model`` (FastAPI ``openapi_extra``), so that schema
    fuzzers (Schemathesis) know the body without the route declaring a typed parameter,
    which would make FastAPI validate it in OpenAI's envelope before the door could."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": _inline(schema, defs)}}}}


def _inline(node: Any, defs: dict) -> Any:
    # pydantic's "#/$defs/..." references would point at the root of the OpenAPI document;
    # these models are not recursive, so each reference is replaced by its definition.
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            return _inline(defs[ref.rsplit("/", 1)[1]], defs)
        return {k: _inline(v, defs) for k, v in node.items()}
    if isinstance(node, list):
        return [_inline(v, defs) for v in node]
    return node
