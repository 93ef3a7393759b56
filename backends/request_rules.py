"""The OpenAI API's rules for the chat fields mixroute declares (content parts per role, tool
calls, tools, ``tool_choice``, legacy ``functions``, ``modalities``), checked by the request
models of :mod:`backends.request`.

Each check raises :class:`Invalid` (a ``ValueError``, so pydantic reports it on the field)
carrying the path below the field, so that the error's ``param`` names the exact spot
(``messages.2.content.0.type``).
"""

from __future__ import annotations

import re
from typing import Any


class Invalid(ValueError):
    """A validator's error about something inside its field: ``at`` is the path below the
    field (``(0, "type")`` for ``content[0].type``), which the gateway's validation appends to the
    error's location so that ``param`` names the exact spot."""

    def __init__(self, message: str, *at: str | int) -> None:
        super().__init__(message)
        self.at = at


#: Content part types per role: the OpenAI API's (openai-python's message param types);
#: user messages also take the media parts vLLM's chat API adds (``MM_PARSER_MAP`` in
#: vllm/entrypoints/chat_utils.py), and assistant messages its ``thinking`` part.
PART_TYPES: dict[str, tuple[str, ...]] = {
    "user": ("text", "image_url", "input_audio", "file", "audio_url", "video_url", "image_embeds", "audio_embeds"),
    "assistant": ("text", "refusal", "thinking"),
    "system": ("text",), "developer": ("text",), "tool": ("text",), "function": ("text",),
}


#: The payload a media part must carry, per type: ``(key, inner keys that must be strings)``
#: (openai-python's ``ChatCompletionContentPart*Param``; vLLM's video/audio URL parts).
PART_PAYLOADS: dict[str, tuple[str, tuple[str, ...]]] = {
    "image_url": ("image_url", ("url",)), "input_audio": ("input_audio", ("data", "format")),
    "video_url": ("video_url", ("url",)), "audio_url": ("audio_url", ("url",)), "file": ("file", ()),
}


def _check_payload(part: dict, kind: str, i: int) -> None:
    key, strings = PART_PAYLOADS[kind]
    inner = part.get(key)
    if not isinstance(inner, dict):
        example = ", ".join(f'"{k}": "..."' for k in strings) or '"file_id": "..."'
        raise Invalid(f"{article(kind)} '{kind}' part needs {article(key)} '{key}' object such as {{{example}}}, "
                      f"not {short(inner)}", i, key)
    for name in strings:
        if not isinstance(inner.get(name), str):
            raise Invalid(f"needs a string '{name}'", i, key, name)


def check_parts(content: list, role: str | None) -> None:
    """A message's content parts: objects of a type ``role`` takes (:data:`PART_TYPES`). Text
    parts are read by the router (classifier, rewriter, token estimate), so their ``text``
    must be a string; media parts must carry their payload object, whose contents (an
    image's bytes, a file id) are the backend's to judge. The array must not be empty (every
    role's content array has ``minItems: 1`` in OpenAI's OpenAPI spec)."""
    if not content:
        raise Invalid("must not be an empty array; send a string or at least one content part")
    allowed = PART_TYPES.get(role or "")
    for i, part in enumerate(content):
        if not isinstance(part, dict):
            raise Invalid(f"must be an object such as {{\"type\": \"text\", \"text\": \"...\"}}, "
                          f"not {type(part).__name__}", i)
        kind = part.get("type")
        if not isinstance(kind, str):
            raise Invalid("a content part needs a string 'type' (e.g. 'text', 'image_url')", i, "type")
        if allowed is not None and kind not in allowed:
            raise Invalid(f"unknown content part type {kind[:40]!r} in a '{role}' message "
                          f"(expected {', '.join(map(repr, allowed))})", i, "type")
        if kind == "text" and not isinstance(part.get("text"), str):
            raise Invalid("a 'text' part needs a string 'text'", i, "text")
        if kind == "refusal" and not isinstance(part.get("refusal"), str):
            raise Invalid("a 'refusal' part needs a string 'refusal'", i, "refusal")
        if kind in PART_PAYLOADS:
            _check_payload(part, kind, i)


def check_tool_calls(calls: list[dict[str, Any]]) -> None:
    """An assistant message's tool calls: ``{id, type: function, function: {name, arguments}}``
    or ``{id, type: custom, custom: {name, input}}``; arguments/input are strings (JSON text)."""
    for i, call in enumerate(calls):
        if not isinstance(call.get("id"), str):
            raise Invalid("a tool call needs a string 'id'", i, "id")
        kind = call.get("type")
        if kind not in ("function", "custom"):
            raise Invalid(f"a tool call's 'type' must be 'function' or 'custom', not {short(kind)}", i, "type")
        inner, text = call.get(kind), "arguments" if kind == "function" else "input"
        if not isinstance(inner, dict):
            raise Invalid(f"a '{kind}' tool call needs a '{kind}' object", i, kind)
        if not isinstance(inner.get("name"), str):
            raise Invalid("needs a string 'name'", i, kind, "name")
        if not isinstance(inner.get(text), str):
            raise Invalid(f"needs a string '{text}'", i, kind, text)


def article(word: str) -> str:
    """``a`` or ``an`` before ``word``, for messages."""
    if word.lower().startswith(("us", "uni", "eu")):  # a 'user' message: a "you" sound
        return "a"
    return "an" if word[:1].lower() in "aeiou" else "a"


def short(value: Any) -> str:
    """``repr(value)`` cut to 40 characters, for messages."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


#: Output modalities: the OpenAI API's (``ResponseModalities``: text, audio), plus ``image``,
#: which LiteLLM (the hosted backends) passes to Gemini's image-generating models.
MODALITIES = ("text", "audio", "image")


def check_modalities(modalities: list[str]) -> None:
    """``modalities``: each one of :data:`MODALITIES`."""
    for i, kind in enumerate(modalities):
        if kind not in MODALITIES:
            raise Invalid(f"unknown modality {kind[:40]!r} (expected {', '.join(map(repr, MODALITIES))})", i)


#: The OpenAI API's rule for function names.
FUNCTION_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")


def check_tools(tools: list[dict[str, Any]]) -> None:
    """The OpenAI API's tools: function tools (name: letters, digits, '_' and '-', at most 64)
    and custom tools; names are unique, as tool calls and ``tool_choice`` name them."""
    seen: dict[str, int] = {}
    for i, tool in enumerate(tools):
        kind = tool.get("type")
        if kind not in ("function", "custom"):
            raise Invalid(f"a tool's 'type' must be 'function' or 'custom', not {short(kind)}", i, "type")
        inner = tool.get(kind)
        if not isinstance(inner, dict):
            raise Invalid(f"a '{kind}' tool needs a '{kind}' object with a 'name'", i, kind)
        name = inner.get("name")
        if not isinstance(name, str) or not name:
            raise Invalid(f"needs a non-empty string 'name', not {short(name)}", i, kind, "name")
        if kind == "function" and not FUNCTION_NAME.fullmatch(name):
            raise Invalid(f"{short(name)} is not a valid function name (letters, digits, '_' and '-', "
                          "at most 64 characters)", i, kind, "name")
        if kind == "function":
            check_parameters(inner, i, kind)
        if name in seen:
            raise Invalid(f"{short(name)} is also the name of tool {seen[name]}; tool names must be unique",
                          i, kind, "name")
        seen[name] = i


def check_parameters(fn: dict[str, Any], *at: str | int) -> None:
    """A function's ``parameters``, when given, must be an object (OpenAI's spec:
    ``FunctionParameters`` is ``type: object``); whether it is valid JSON Schema is the
    backend's to judge. ``null`` is let through, as the spec's reading of it is unclear."""
    check_schema_object(fn.get("parameters"), *at, "parameters")


def check_schema_object(schema: Any, *at: str | int) -> None:
    """A JSON Schema slot (a function's ``parameters``, ``json_schema.schema``) holds an
    object or ``null``; at ``at`` below the field otherwise."""
    if schema is not None and not isinstance(schema, dict):
        raise Invalid("must be a JSON Schema object such as {\"type\": \"object\", \"properties\": {...}}, "
                      f"not {short(schema)}", *at)


def check_tool_choice(choice: dict[str, Any], tools: list[dict[str, Any]]) -> None:
    """An object ``tool_choice`` (one function or custom tool, or ``allowed_tools``) must name
    tools of ``tools`` (already checked by :func:`check_tools`)."""
    kind = choice.get("type")
    if kind == "allowed_tools":
        allowed = choice.get("allowed_tools")
        if not (isinstance(allowed, dict) and allowed.get("mode") in ("auto", "required")
                and isinstance(allowed.get("tools"), list) and allowed["tools"]):
            raise ValueError("type 'allowed_tools' needs an 'allowed_tools' object with a 'mode' "
                             "('auto' or 'required') and a non-empty list of 'tools'")
        wanted = allowed["tools"]
    elif kind in ("function", "custom"):
        wanted = [choice]
    else:
        raise ValueError(f"'type' must be 'function', 'custom' or 'allowed_tools', not {short(kind)}")
    offered = {(t["type"], t[t["type"]]["name"]) for t in tools}
    for ref in wanted:
        ref_kind = ref.get("type") if isinstance(ref, dict) else None
        inner = ref.get(ref_kind) if ref_kind in ("function", "custom") else None
        name = inner.get("name") if isinstance(inner, dict) else None
        if not isinstance(name, str):
            raise ValueError(f"needs a {ref_kind or 'function'} name (a string), not {short(name)}")
        if (ref_kind, name) not in offered:
            raise ValueError(f"names the {ref_kind} {name[:64]!r}, which is not in 'tools'")


def check_functions(functions: list[dict[str, Any]]) -> None:
    """The legacy ``functions``: each has a valid function name and, if any, object ``parameters``."""
    for i, fn in enumerate(functions):
        name = fn.get("name")
        if not isinstance(name, str) or not FUNCTION_NAME.fullmatch(name):
            raise Invalid(f"needs a 'name' of letters, digits, '_' and '-' (at most 64), not {short(name)}",
                          i, "name")
        check_parameters(fn, i)


def check_function_call(call: dict[str, Any], functions: list[dict[str, Any]]) -> None:
    """An object ``function_call`` names one of ``functions``."""
    if not isinstance(call.get("name"), str):
        raise ValueError(f"needs a function 'name' (a string), not {short(call.get('name'))}")
    if call["name"] not in {fn.get("name") for fn in functions}:
        raise ValueError(f"names the function {call['name'][:64]!r}, which is not in 'functions'")
