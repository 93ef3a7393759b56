"""Request parsing for the OpenAI endpoints: size limit, UTF-8, JSON, then a pydantic
model that checks the fields mixroute relies on and lets every other field through
(``extra="allow"``) so it reaches the backend unchanged.
"""

from __future__ import annotations

from typing import Any, Literal

import orjson
from fastapi import Request
from starlette.requests import ClientDisconnect
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from router.errors import ContextTooLarge, InvalidRequest, UnsupportedMediaType

Role = Literal["system", "developer", "user", "assistant", "tool", "function"]


class Message(BaseModel):
    """One chat message. ``content`` may be null only for an assistant message that
    carries ``tool_calls`` (or a legacy ``function_call``); a ``tool`` message needs
    ``tool_call_id`` (the OpenAI API's rules)."""

    model_config = ConfigDict(extra="allow", strict=True)

    role: Role
    content: str | list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    name: str | None = None

    @field_validator("content", mode="before")
    @classmethod
    def _parts(cls, content: Any) -> Any:
        # Text parts are read by the router (classifier, rewriter, token estimate): their
        # ``text`` must be a string. Other part types (images, audio, files) pass through.
        if isinstance(content, list):
            for i, part in enumerate(content):
                if not isinstance(part, dict):
                    raise ValueError(f"part {i} must be an object such as {{\"type\": \"text\", \"text\": \"...\"}}, "
                                     f"not {type(part).__name__}")
                kind = part.get("type")
                if not isinstance(kind, str):
                    raise ValueError(f"part {i} needs a string 'type' (e.g. 'text', 'image_url')")
                if kind == "text" and not isinstance(part.get("text"), str):
                    raise ValueError(f"part {i} is of type 'text' and needs a string 'text'")
        return content

    @model_validator(mode="after")
    def _rules(self) -> "Message":
        extra = self.model_extra or {}
        if self.content is None and not (self.role == "assistant" and (extra.get("tool_calls")
                                                                       or extra.get("function_call"))):
            raise ValueError(f"a '{self.role}' message needs 'content'")
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a 'tool' message needs 'tool_call_id'")
        return self


class ResponseFormat(BaseModel):
    """``response_format``: ``text``, ``json_object`` or ``json_schema`` (with a ``json_schema``
    object naming the schema)."""

    model_config = ConfigDict(extra="allow", strict=True)

    type: Literal["text", "json_object", "json_schema"]
    json_schema: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _schema(self) -> "ResponseFormat":
        if self.type == "json_schema" and not (self.json_schema and isinstance(self.json_schema.get("name"), str)):
            raise ValueError("type 'json_schema' needs a 'json_schema' object with a 'name'")
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

    @field_validator("top_logprobs")
    @classmethod
    def _top_logprobs(cls, top: Any, info: ValidationInfo) -> Any:
        # The OpenAI API: top_logprobs needs logprobs set to true.
        if top is not None and not info.data.get("logprobs"):
            raise ValueError("needs 'logprobs': true")
        return top

    @field_validator("tools")
    @classmethod
    def _tools(cls, tools: Any) -> Any:
        for i, tool in enumerate(tools or ()):
            kind = tool.get("type")
            if not isinstance(kind, str):
                raise ValueError(f"tool {i} needs a string 'type' (e.g. 'function')")
            if kind == "function":
                function = tool.get("function")
                if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
                    raise ValueError(f"tool {i} is of type 'function' and needs a 'function' object with a 'name'")
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
        names = {name for t in tools if isinstance(t, dict) and isinstance(t.get("function"), dict)
                 and isinstance(name := t["function"].get("name"), str)}
        if isinstance(choice, dict):
            wanted = (choice.get("function") or {}).get("name") if isinstance(choice.get("function"), dict) else None
            if not isinstance(wanted, str):
                raise ValueError(f"needs a function name (a string), not {wanted!r}")
            if wanted not in names:
                raise ValueError(f"names the function {wanted!r}, which is not in 'tools'")
        return choice


class CompletionRequest(_Common):
    """``POST /v1/completions`` body."""

    prompt: str | list[str] = Field(min_length=1)
    # The legacy API's logprobs is a count of top tokens (OpenAI: at most 5; vLLM: 20).
    logprobs: int | None = Field(default=None, ge=0, le=20)


_MISSING = {"missing": "missing_required_parameter"}

def refuse_cross_site(content_type: str | None) -> None:
    """For a gateway with auth off: accept only JSON bodies (``application/json`` or
    ``application/*+json``), so that a web page cannot make a visitor's local gateway spend
    its backends' money with a cross-site form, ``fetch`` or beacon: the content types those
    send without a CORS preflight (``text/plain``, form types, or none at all: an untyped
    Blob, ``navigator.sendBeacon``) are refused, and JSON needs a preflight, which the
    gateway does not answer.

    Raises:
        UnsupportedMediaType: (415) no Content-Type, or one that is not JSON.
    """
    kind = (content_type or "").split(";", 1)[0].strip().lower()
    if kind == "application/json" or (kind.startswith("application/") and kind.endswith("+json")):
        return
    shown = f"Content-Type {kind}" if kind else "a request without Content-Type"
    raise UnsupportedMediaType(f"{shown} is not accepted while auth is off (a web page could send it cross-site); "
                               "send Content-Type: application/json", param="content-type")


async def read_json(request: Request, max_bytes: int) -> dict:
    """Read the body with a size cap and parse it as a JSON object.

    Raises:
        ContextTooLarge: body over ``max_bytes`` (413).
        InvalidRequest: not UTF-8, not JSON, or not an object (400).
    """
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > max_bytes:
        raise ContextTooLarge(f"Request body of {declared} bytes exceeds the limit of {max_bytes} bytes")
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > max_bytes:
                raise ContextTooLarge(f"Request body exceeds the limit of {max_bytes} bytes")
            chunks.append(chunk)
    except ClientDisconnect:
        # The client went away mid-upload: nothing was accepted, nobody reads the answer.
        raise InvalidRequest("The client disconnected before the request body was complete",
                             code="client_disconnected") from None
    raw = b"".join(chunks)
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRequest(f"The request body is not valid UTF-8 (byte {exc.start})", code="invalid_encoding") from None
    if not raw.strip():
        raise InvalidRequest("The request body is empty; send a JSON object", code="invalid_json")
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"The request body is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(data, dict):
        raise InvalidRequest("The request body must be a JSON object", code="invalid_json")
    if _too_deep(data, MAX_DEPTH):
        raise InvalidRequest(f"The request body nests arrays/objects deeper than {MAX_DEPTH} levels",
                             code="invalid_json")
    return data


#: Deepest nesting of arrays/objects accepted in a body. orjson parses up to 1024 levels but
#: writes back at most 254 (a /v1/route answer, a body forwarded to a backend), so anything
#: deeper used to fail after it was accepted (a 500, or a 502 blamed on the backend).
MAX_DEPTH = 128


def _too_deep(data: Any, limit: int) -> bool:
    """Whether ``data`` nests lists/dicts more than ``limit`` levels (iterative: no recursion)."""
    level, frontier = 1, [data]
    while frontier:
        if level > limit:
            return True
        nxt = []
        for node in frontier:
            if isinstance(node, dict):
                nxt.extend(v for v in node.values() if isinstance(v, (dict, list)))
            elif isinstance(node, list):
                nxt.extend(v for v in node if isinstance(v, (dict, list)))
        frontier, level = nxt, level + 1
    return False


def validate(model: type[BaseModel], data: dict) -> dict:
    """Validate ``data`` against ``model``; return the body to forward (unset fields stay unset).

    Raises:
        InvalidRequest: the first problem, with ``param`` set to the field path.
    """
    try:
        model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        param = _param(data, err["loc"])
        if err["type"] == "literal_error" and err["loc"] and err["loc"][-1] == "role":
            msg = f"{param}: unknown role {err.get('input')!r} (expected one of {', '.join(Role.__args__)})"
        elif err["type"] == "too_short" and param in ("messages", "prompt"):
            msg = f"{param}: must not be empty"
        else:
            text = err["msg"].removeprefix("Value error, ").split(" or instance of ")[0]  # no class names
            msg = f"{param}: {text}" if param else text
        raise InvalidRequest(msg, param=param or None, code=_MISSING.get(err["type"], "invalid_value")) from None
    return data


_TYPE_TAGS = {"str", "int", "float", "bool", "none", "dict", "list"}


def _param(data: Any, loc: tuple) -> str:
    """The request field a validation error is about, as ``a.0.b``: the error location
    without pydantic's union-member and validator tags (``str``, ``list[...]``...)."""
    parts, node = [], data
    for part in loc:
        if isinstance(part, str) and ("[" in part or part in _TYPE_TAGS):
            continue  # a union member or validator tag, not a field
        parts.append(str(part))
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
        else:
            break  # a missing field: its name is the param
    return ".".join(parts)
