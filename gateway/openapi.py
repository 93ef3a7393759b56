"""Request bodies in ``/openapi.json`` for endpoints that read their body themselves.

The API endpoints read the body with :func:`gateway.request_body.read_json` (size cap,
UTF-8, JSON depth, cross-site rule) and validate it afterwards, so FastAPI never sees a
body parameter and would declare none. ``openapi_extra=request_body(Model)`` declares a
pydantic model's JSON schema as the operation's body; the models it refers to are added
to ``components.schemas`` by :func:`install`.

Chat, legacy completions and feedback bodies are declared from the models that validate
them (:mod:`gateway.schemas`, :class:`gateway.api.feedback.FeedbackRequest`). The
embeddings and Responses doors check their bodies field by field
(:func:`gateway.doors.embeddings.check_body`, :mod:`gateway.doors.responses_input`);
:class:`EmbeddingsRequest` and :class:`ResponsesRequest` below state the same rules as a schema,
for the document only.
"""

from __future__ import annotations

from typing import Any
from typing import Literal

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field

from gateway.doors.embeddings import MAX_INPUTS

REF = "#/components/schemas/{model}"
_COMPONENTS: dict[str, dict[str, Any]] = {}
"""Schemas of the models named by :func:`request_body` and of the models they refer to."""


def request_body(model: type[BaseModel], description: str | None = None) -> dict[str, Any]:
    """``openapi_extra`` declaring a required JSON body validated by ``model``."""
    schema = model.model_json_schema(ref_template=REF)
    for name, sub in schema.pop("$defs", {}).items():
        _COMPONENTS.setdefault(name, sub)
    _COMPONENTS.setdefault(model.__name__, schema)
    body: dict[str, Any] = {"required": True,
                            "content": {"application/json": {"schema": {"$ref": REF.format(model=model.__name__)}}}}
    if description:
        body["description"] = description
    return {"requestBody": body}


def install(app: FastAPI) -> None:
    """Make ``app.openapi()`` carry the schemas :func:`request_body` refers to."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            spec = build()
            schemas = spec.setdefault("components", {}).setdefault("schemas", {})
            for name, schema in _COMPONENTS.items():
                schemas.setdefault(name, schema)
            app.openapi_schema = spec
        return app.openapi_schema

    app.openapi = openapi


def one_of(*models: type[BaseModel]) -> dict[str, Any]:
    """``openapi_extra`` declaring a JSON body that is any one of ``models``."""
    refs = [request_body(m)["requestBody"]["content"]["application/json"]["schema"] for m in models]
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": {"oneOf": refs}}}}}


class EmbeddingsRequest(BaseModel):
    """``POST /v1/embeddings`` (the OpenAI Embeddings API's body; other fields pass through)."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1, description="an embedding backend or route of the policy")
    input: str | list[str] | list[int] | list[list[int]] = Field(
        description=f"a string, or at most {MAX_INPUTS} non-empty strings, token ids or token-id arrays")
    encoding_format: Literal["float", "base64"] | None = None
    dimensions: int | None = Field(default=None, ge=1)
    user: str | None = None


class ResponsesRequest(BaseModel):
    """``POST /v1/responses`` (the OpenAI Responses API's body; other fields pass through)."""

    model_config = ConfigDict(extra="allow")

    model: str | None = Field(default=None, description="a route or backend; the policy's default route if absent")
    input: str | list[dict[str, Any]] = Field(
        description="a string, or message, function_call, function_call_output and reasoning items")
    instructions: str | None = None
    previous_response_id: str | None = None
    store: bool = True
    stream: bool = False
    tools: list[dict[str, Any]] | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
