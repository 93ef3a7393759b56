"""Request bodies in ``/openapi.json`` for endpoints that read their body themselves.

The API endpoints read the body with :func:`gateway.request_body.read_json` (size cap,
UTF-8, JSON depth, cross-site rule) and validate it with a pydantic model afterwards, so
FastAPI never sees a body parameter and would declare none. ``openapi_extra=
request_body(Model)`` declares the model's JSON schema as the operation's body; the models
it refers to are added to ``components.schemas`` by :func:`install`.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel

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
