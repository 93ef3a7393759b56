"""Request parsing for the OpenAI endpoints: size limit, UTF-8, JSON, then a pydantic
model that checks the fields mixroute relies on and lets every other field through
(``extra="allow"``) so it reaches the backend unchanged.
"""

from __future__ import annotations

from typing import Any, Literal

import orjson
from fastapi import Request
from starlette.requests import ClientDisconnect
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from router.errors import ContextTooLarge, InvalidRequest

Role = Literal["system", "developer", "user", "assistant", "tool", "function"]


class Message(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)

    role: Role
    content: str | list[dict[str, Any]] | None = None


class _Common(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)

    model: str | None = Field(default=None, min_length=1)
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    n: int | None = Field(default=None, ge=1, le=128)
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    stop: str | list[str] | None = None
    seed: int | None = None
    user: str | None = None


class ChatCompletionRequest(_Common):
    """``POST /v1/chat/completions`` body (fields checked here; others pass through)."""

    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None


class CompletionRequest(_Common):
    """``POST /v1/completions`` body."""

    prompt: str | list[str] = Field(min_length=1)


_MISSING = {"missing": "missing_required_parameter"}


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
    return data


def validate(model: type[BaseModel], data: dict) -> dict:
    """Validate ``data`` against ``model``; return the body to forward (unset fields stay unset).

    Raises:
        InvalidRequest: the first problem, with ``param`` set to the field path.
    """
    try:
        model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        param = ".".join(str(p) for p in err["loc"] if not str(p).startswith(("function-", "union[")))
        if err["type"] == "literal_error" and err["loc"][-1] == "role":
            msg = f"{param}: unknown role {err.get('input')!r} (expected one of {', '.join(Role.__args__)})"
        elif err["type"] == "too_short" and param in ("messages", "prompt"):
            msg = f"{param}: must not be empty"
        else:
            msg = f"{param}: {err['msg']}"
        raise InvalidRequest(msg, param=param, code=_MISSING.get(err["type"], "invalid_value")) from None
    return data
