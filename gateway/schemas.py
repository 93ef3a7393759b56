"""Request validation for the OpenAI endpoints, after :mod:`gateway.request_body` read the
body (size limit, UTF-8, JSON, depth), against the typed canonical request of the floor
(:mod:`backends.request`): the first problem becomes the client's
:class:`~router.errors.InvalidRequest`, its ``param`` naming the field.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from backends.request import (MAX_PROMPTS, ChatCompletionRequest, CompletionRequest, Message, ResponseFormat, Role,
                              StreamOptions)
from router.errors import InvalidRequest

__all__ = ["MAX_PROMPTS", "ChatCompletionRequest", "CompletionRequest", "Message", "ResponseFormat", "Role",
           "StreamOptions", "validate"]

_MISSING = {"missing": "missing_required_parameter"}

def validate(model: type[BaseModel], data: dict) -> dict:
    """Validate ``data`` against ``model``; return the body to forward (unset fields stay unset).

    Raises:
        InvalidRequest: the first problem, with ``param`` set to the field path.
    """
    try:
        model.model_validate(data)
    except ValidationError as exc:
        err = _pick(exc.errors())
        param = _param(data, err["loc"], getattr((err.get("ctx") or {}).get("error"), "at", ()))
        if err["type"] == "literal_error" and err["loc"] and err["loc"][-1] == "role":
            msg = f"{param}: unknown role {err.get('input')!r} (expected one of {', '.join(Role.__args__)})"
        elif err["type"] == "too_short" and param in ("messages", "prompt"):
            msg = f"{param}: must not be empty"
        elif err["type"] == "union_tag_not_found":
            msg = f"{param}: must be an object with a 'type'"
        elif err["type"] == "union_tag_invalid":
            ctx = err.get("ctx") or {}
            msg = f"{param}: unknown type {str(ctx.get('tag'))[:60]!r} (expected one of {ctx.get('expected_tags')})"
        elif err["type"] == "model_attributes_type":
            msg = f"{param}: must be an object"
        else:
            text = err["msg"].removeprefix("Value error, ").split(" or instance of ")[0]  # no class names
            msg = f"{param}: {text}" if param else text
        raise InvalidRequest(msg, param=param or None, code=_MISSING.get(err["type"], "invalid_value")) from None
    return data


_TYPE_TAGS = {"str", "int", "float", "bool", "none", "dict", "list"}


def _is_member(part: object) -> bool:
    return isinstance(part, str) and ("[" in part or part in _TYPE_TAGS)


def _walks(node: Any, part: Any) -> bool:
    return (isinstance(node, dict) and part in node) or (
        isinstance(node, list) and isinstance(part, int) and part < len(node))


def _is_tag(node: Any, part: Any, after: Any) -> bool:
    """Whether ``part`` of an error location is the tag pydantic puts after an object of a
    tagged union (its ``type``) rather than one of the object's fields: it is the object's
    ``type``, and the rest of the location goes on in the object itself rather than in the
    field of that name (a ``text`` block's ``text``, a ``json_schema`` format's ``json_schema``)."""
    if not isinstance(node, dict) or node.get("type") != part:
        return False
    if part not in node:
        return True
    return after is not None and _walks(node, after) and not _walks(node[part], after)


def _pick(errors: list[dict]) -> dict:
    """The error to report. pydantic reports a union's members in order, so for a field that
    is ``str | list[Block]`` the first error of an array with one bad block is "should be a
    valid string"; when that first error only says the value is not of one member's type,
    the first error found deeper inside the same field (the bad block's own) is the one that
    names the problem."""
    first = errors[0]
    loc = first["loc"]
    if first["type"].endswith("_type") and loc and _is_member(loc[-1]):
        base = loc[:-1]
        for err in errors[1:]:
            if err["loc"][:len(base)] == base and len(err["loc"]) > len(loc):
                return err
    return first


def _param(data: Any, loc: tuple, at: tuple = ()) -> str:
    """The request field a validation error is about, as ``a.0.b``: the error location
    without pydantic's union-member and validator tags (``str``, ``list[...]``, a tagged
    union's tag...), then ``at``, the path below that field a validator named (taken as it is)."""
    fields = [p for p in loc if not (isinstance(p, str) and ("[" in p or p in _TYPE_TAGS))]
    parts, node = [], data
    path, tagged = (*fields, *at), None
    for n, part in enumerate(path):
        after = path[n + 1] if n + 1 < len(path) else None
        if n < len(fields) and node is not tagged and _is_tag(node, part, after):
            tagged = node  # a tagged union's member: the tag is the object's own 'type'
            continue
        parts.append(str(part))
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
        else:
            break  # a missing field: its name is the param
    return ".".join(parts)
