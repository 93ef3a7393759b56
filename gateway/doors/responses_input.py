"""An OpenAI Responses request as the canonical Chat Completions body.

Written here rather than taken from litellm's Responses bridge
(``LiteLLMCompletionResponsesConfig.transform_responses_api_input_to_messages``), which
maps the same items to the same messages but falls short for a gateway door:

- importing it loads all of litellm, about 5 s of start-up (the gateway imports litellm
  only when a hosted backend is configured);
- it drops an item of an unknown type without a word, and turns ``web_search`` tools into
  chat ``web_search_options``; the door must refuse both with a 400 naming the field;
- its request-level transform asks litellm's provider registry about the model name (the
  door routes before any provider is known) and adds litellm-only keys
  (``custom_llm_provider``, ``reasoning_summary``) and a stream ``index`` on tool calls.

Field mapping: https://platform.openai.com/docs/api-reference/responses/create against
https://platform.openai.com/docs/api-reference/chat/create.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from router.errors import InvalidRequest

ROLES = ("user", "assistant", "system", "developer")
PART_TYPES = {"input_text", "input_image", "output_text", "refusal"}
"""Content part types of message items the door takes (``input_file``, ``input_audio``: no)."""
IGNORED_ITEMS = {"reasoning"}
"""Item types dropped from the conversation: a model's reasoning is its own to replay."""
IGNORED_FIELDS = {"include", "truncation", "prompt_cache_retention", "prompt_cache_options", "context_management",
                  "stream_options", "top_logprobs", "max_tool_calls", "background"}
"""Request fields without a chat equivalent that change nothing the door answers."""
UNSUPPORTED_FIELDS = {"conversation": "conversations", "prompt": "stored prompt templates"}
"""Request fields asking for server-side features this gateway does not have (refused unless null)."""
PASSED = ("temperature", "top_p", "user", "safety_identifier", "service_tier", "prompt_cache_key", "seed")
"""Request fields with the same name and meaning in Chat Completions."""
_OWN = {"model", "input", "instructions", "tools", "tool_choice", "text", "reasoning", "max_output_tokens",
        "parallel_tool_calls", "metadata", "store", "stream", "previous_response_id", *PASSED}


@dataclass
class ParsedRequest:
    """A Responses request taken apart.

    Attributes:
        body: the canonical chat body (not yet validated by :mod:`gateway.schemas`).
        input_items: the request's own input, as items (a string input is one user message).
        echo: the request fields the response object repeats (``instructions``, ``tools``...).
    """

    body: dict
    input_items: list[dict]
    echo: dict = field(default_factory=dict)


def _bad(message: str, param: str, code: str = "invalid_value") -> InvalidRequest:
    return InvalidRequest(f"{param}: {message}", param=param, code=code)


def input_items(raw: Any) -> list[dict]:
    """The request's ``input`` as a list of items, each checked.

    Raises:
        InvalidRequest: not a string or a list of known items.
    """
    if isinstance(raw, str):
        return [{"type": "message", "role": "user", "content": raw}]
    if not isinstance(raw, list):
        raise _bad("must be a string or an array of input items", "input")
    for i, item in enumerate(raw):
        _check_item(item, f"input.{i}")
    return raw


def _check_item(item: Any, where: str) -> None:
    if not isinstance(item, dict):
        raise _bad("must be an object", where)
    kind = item.get("type", "message" if "role" in item else None)
    if kind == "message":
        _check_message(item, where)
    elif kind == "function_call":
        for key in ("call_id", "name", "arguments"):
            if not isinstance(item.get(key), str):
                raise _bad(f"a function_call item needs a string '{key}'", f"{where}.{key}")
    elif kind == "function_call_output":
        if not isinstance(item.get("call_id"), str):
            raise _bad("a function_call_output item needs a string 'call_id'", f"{where}.call_id")
        if not isinstance(item.get("output"), (str, list)):
            raise _bad("a function_call_output item needs 'output' (a string or an array)", f"{where}.output")
    elif kind not in IGNORED_ITEMS:
        raise _bad(f"unsupported input item type {kind!r} (this gateway takes message, function_call, "
                   "function_call_output and reasoning items)", f"{where}.type", "unsupported_item_type")


def _check_message(item: dict, where: str) -> None:
    role = item.get("role")
    if role not in ROLES:
        raise _bad(f"role must be one of {', '.join(ROLES)}, not {role!r}", f"{where}.role")
    content = item.get("content")
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        raise _bad("content must be a string or an array of content parts", f"{where}.content")
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in PART_TYPES:
            raise _bad(f"unsupported content part type {kind!r} (this gateway takes {', '.join(sorted(PART_TYPES))})",
                       f"{where}.content.{j}.type", "unsupported_content_type")
        if kind == "input_image" and not isinstance(part.get("image_url"), str):
            raise _bad("an input_image part needs an 'image_url' (a URL or a data: URL; file_id is not supported)",
                       f"{where}.content.{j}.image_url")


def messages(instructions: str | None, items: list[dict]) -> list[dict]:
    """Chat messages for ``instructions`` (a system message first) and checked ``items``:
    message items as messages, a run of ``function_call`` items as the ``tool_calls`` of
    one assistant message (the assistant text just before them included), each
    ``function_call_output`` as a ``tool`` message; ``reasoning`` items are left out."""
    out: list[dict] = [{"role": "system", "content": instructions}] if instructions else []
    for item in items:
        kind = item.get("type", "message")
        if kind == "message":
            content = item["content"]
            out.append({"role": item["role"],
                        "content": content if isinstance(content, str) else [_part(p) for p in content]})
        elif kind == "function_call":
            call = {"id": item["call_id"], "type": "function",
                    "function": {"name": item["name"], "arguments": item["arguments"]}}
            last = out[-1] if out else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item["output"]
            if isinstance(output, list):  # parts: their text (images in tool output: not in chat)
                output = "".join(p.get("text", "") for p in output if isinstance(p, dict))
            out.append({"role": "tool", "tool_call_id": item["call_id"], "content": output})
    return out


def _part(part: dict) -> dict:
    kind = part["type"]
    if kind == "input_image":
        return {"type": "image_url", "image_url": {"url": part["image_url"], "detail": part.get("detail") or "auto"}}
    if kind == "refusal":
        return {"type": "refusal", "refusal": part.get("refusal", "")}
    return {"type": "text", "text": part.get("text", "")}


def tools(raw: Any) -> list[dict]:
    """Chat tools for Responses ``tools`` (function tools only).

    Raises:
        InvalidRequest: not a list, or a tool of another type (hosted tools need a backend
            that runs them; none here does).
    """
    if not isinstance(raw, list):
        raise _bad("must be an array of tools", "tools")
    out = []
    for i, tool in enumerate(raw):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind != "function":
            raise _bad(f"tool type {kind!r} is not supported by this gateway: only 'function' tools are",
                       f"tools.{i}.type", "unsupported_tool_type")
        if not isinstance(tool.get("name"), str) or not tool["name"]:
            raise _bad("a function tool needs a 'name'", f"tools.{i}.name")
        fn = {"name": tool["name"]}
        for key in ("description", "parameters", "strict"):
            if tool.get(key) is not None:
                fn[key] = tool[key]
        out.append({"type": "function", "function": fn})
    return out


def tool_choice(raw: Any) -> str | dict:
    """Chat ``tool_choice`` for a Responses one: ``auto``/``none``/``required`` or
    ``{"type": "function", "name": ...}``.

    Raises:
        InvalidRequest: another form (hosted tools, ``allowed_tools``).
    """
    if raw in ("auto", "none", "required"):
        return raw
    if isinstance(raw, dict) and raw.get("type") == "function" and isinstance(raw.get("name"), str):
        return {"type": "function", "function": {"name": raw["name"]}}
    raise _bad("must be 'auto', 'none', 'required' or {\"type\": \"function\", \"name\": ...}", "tool_choice")


def response_format(text: Any) -> dict | None:
    """Chat ``response_format`` for Responses ``text.format`` (``None`` for plain text)."""
    if not isinstance(text, dict):
        raise _bad("must be an object", "text")
    fmt = text.get("format")
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        spec = {k: fmt[k] for k in ("name", "schema", "strict", "description") if fmt.get(k) is not None}
        return {"type": "json_schema", "json_schema": spec}
    raise _bad(f"format type {kind!r} is not one of text, json_object, json_schema", "text.format.type")


def translate(raw: dict, history: list[dict]) -> ParsedRequest:
    """The chat body for the Responses body ``raw``, continuing ``history`` (the stored
    items of the ``previous_response_id`` chain, oldest first; ``[]`` for none).

    Raises:
        InvalidRequest: a field breaks the Responses API's rules or asks for a feature this
            gateway does not offer; ``param`` names it.
    """
    for name, what in UNSUPPORTED_FIELDS.items():
        if raw.get(name) is not None:
            raise _bad(f"{what} are not supported by this gateway", name, "unsupported_parameter")
    if raw.get("background"):
        raise _bad("background responses are not supported by this gateway", "background", "unsupported_parameter")
    if "input" not in raw:
        raise _bad("is required", "input", "missing_required_parameter")
    items = input_items(raw["input"])
    instructions = raw.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise _bad("must be a string", "instructions")
    body: dict[str, Any] = {"messages": messages(instructions, history + items)}
    if not any(m["role"] != "system" for m in body["messages"]):
        raise _bad("there is nothing to answer: no message, and no previous response", "input")
    if raw.get("model") is not None:
        body["model"] = raw["model"]
    if raw.get("tools"):
        body["tools"] = tools(raw["tools"])
        if raw.get("parallel_tool_calls") is not None:
            body["parallel_tool_calls"] = raw["parallel_tool_calls"]
    if raw.get("tool_choice") is not None:
        body["tool_choice"] = tool_choice(raw["tool_choice"])
    if raw.get("text") is not None:
        fmt = response_format(raw["text"])
        if fmt is not None:
            body["response_format"] = fmt
        if raw["text"].get("verbosity") is not None:
            body["verbosity"] = raw["text"]["verbosity"]
    reasoning = raw.get("reasoning")
    if reasoning is not None:
        if not isinstance(reasoning, dict):
            raise _bad("must be an object", "reasoning")
        if reasoning.get("effort") is not None:
            body["reasoning_effort"] = reasoning["effort"]
    if raw.get("max_output_tokens") is not None:
        body["max_completion_tokens"] = raw["max_output_tokens"]
    for key in PASSED:
        if raw.get(key) is not None:
            body[key] = raw[key]
    # Fields the door does not know pass through, as the chat door passes them (top_k...).
    body.update({k: v for k, v in raw.items()
                 if k not in _OWN and k not in IGNORED_FIELDS and k not in UNSUPPORTED_FIELDS and v is not None})
    metadata = raw.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise _bad("must be an object of string values", "metadata")
    echo = {"instructions": instructions, "tools": raw.get("tools") or [], "tool_choice": raw.get("tool_choice", "auto"),
            "text": raw.get("text") or {"format": {"type": "text"}}, "metadata": metadata or {},
            "max_output_tokens": raw.get("max_output_tokens"), "temperature": raw.get("temperature"),
            "top_p": raw.get("top_p"), "user": raw.get("user"), "reasoning": reasoning,
            "parallel_tool_calls": raw.get("parallel_tool_calls", True),
            "previous_response_id": raw.get("previous_response_id"), "store": raw.get("store", True)}
    return ParsedRequest(body=body, input_items=items, echo=echo)
