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
CHAT_ONLY = {"messages": "input", "response_format": "text.format", "max_tokens": "max_output_tokens",
             "max_completion_tokens": "max_output_tokens", "reasoning_effort": "reasoning.effort",
             "n": None, "stop": None, "logprobs": None, "functions": "tools", "function_call": "tool_choice",
             "modalities": None, "audio": None, "prediction": None, "web_search_options": None,
             "system": "instructions", "stop_sequences": None, "thinking": "reasoning"}
"""Fields of Chat Completions (or of Anthropic's Messages) that the Responses API does not
have, refused rather than passed to the backend (``n: 2`` would be answered, and billed,
twice, and only one answer shown), with the Responses field to use where there is one."""
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
        origins: per chat message, the request field it came from (:func:`messages`).
        call_origins: per tool call (message and call index), the item it came from.
    """

    body: dict
    input_items: list[dict]
    echo: dict = field(default_factory=dict)
    origins: list[str] = field(default_factory=list)
    call_origins: dict[tuple[int, int], str] = field(default_factory=dict)


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
        key = {"input_text": "text", "output_text": "text", "refusal": "refusal"}.get(kind)
        if key is not None and not isinstance(part.get(key), str):
            raise _bad(f"an {kind} part needs a string '{key}'", f"{where}.content.{j}.{key}")
        if kind == "input_image" and not isinstance(part.get("image_url"), str):
            raise _bad("an input_image part needs an 'image_url' (a URL or a data: URL; file_id is not supported)",
                       f"{where}.content.{j}.image_url")


def check_calls(history: list[dict], items: list[dict]) -> None:
    """Each ``function_call_output`` answers a ``function_call`` with its ``call_id`` earlier in
    the conversation, and each ``function_call`` gets its output (OpenAI's rules; a chat
    backend would refuse the messages, or answer a call it never made).

    Raises:
        InvalidRequest: ``param`` names the item of ``items`` at fault, or ``input`` when a
            call of the previous response is left without its output.
    """
    called: dict[str, str] = {}  # call_id -> where the call is
    answered: set[str] = set()
    for where, item in [("previous_response_id", i) for i in history] + [(f"input.{n}", i) for n, i in enumerate(items)]:
        kind = item.get("type", "message")
        if kind == "function_call":
            called[item["call_id"]] = where
        elif kind == "function_call_output":
            if item["call_id"] not in called:
                raise _bad(f"no function_call with call_id '{item['call_id'][:80]}' comes before this "
                           "function_call_output", f"{where}.call_id", "tool_output_without_call")
            answered.add(item["call_id"])
    for call_id, where in called.items():
        if call_id not in answered:
            param = "input" if where == "previous_response_id" else f"{where}.call_id"
            raise _bad(f"no function_call_output for the function call '{call_id[:80]}'"
                       + (" of the previous response" if where == "previous_response_id" else ""),
                       param, "tool_call_without_output")


def messages(instructions: str | None, items: list[dict], origins: list[str] | None = None,
             call_origins: dict[tuple[int, int], str] | None = None, history: int = 0) -> list[dict]:
    """Chat messages for ``instructions`` (a system message first) and checked ``items``:
    message items as messages, a run of ``function_call`` items as the ``tool_calls`` of
    one assistant message (the assistant text just before them included), each
    ``function_call_output`` as a ``tool`` message; ``reasoning`` items are left out.

    ``origins`` (when given) gets, per message, the request field it came from
    (``instructions``, ``input.3``, or ``previous_response_id`` for the first ``history``
    items), and ``call_origins`` the item of each tool call (by message and call index), so
    that a chat rule broken later is reported at the client's own field."""
    out: list[dict] = [{"role": "system", "content": instructions}] if instructions else []
    where = ["instructions"] if instructions else []
    for n, item in enumerate(items):
        origin = "previous_response_id" if n < history else f"input.{n - history}"
        kind = item.get("type", "message")
        if kind == "message":
            content = item["content"]
            out.append({"role": item["role"],
                        "content": content if isinstance(content, str) else [_part(p) for p in content]})
            where.append(origin)
        elif kind == "function_call":
            call = {"id": item["call_id"], "type": "function",
                    "function": {"name": item["name"], "arguments": item["arguments"]}}
            last = out[-1] if out else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
                where.append(origin)
            if call_origins is not None:
                call_origins[(len(out) - 1, len(out[-1]["tool_calls"]) - 1)] = origin
        elif kind == "function_call_output":
            output = item["output"]
            if isinstance(output, list):  # parts: their text (images in tool output: not in chat)
                output = "".join(p.get("text", "") for p in output if isinstance(p, dict))
            out.append({"role": "tool", "tool_call_id": item["call_id"], "content": output})
            where.append(origin)
    if origins is not None:
        origins[:] = where
    return out


RENAMED = (("max_completion_tokens", "max_output_tokens"), ("reasoning_effort", "reasoning.effort"),
           ("response_format.json_schema", "text.format"), ("response_format", "text.format"),
           ("verbosity", "text.verbosity"))
"""Chat fields -> the Responses fields they came from (longest first)."""
_CALL_FIELDS = {"id": "call_id", "function.name": "name", "function.arguments": "arguments", "function": ""}


def responses_param(param: str, parsed: ParsedRequest) -> str:
    """The Responses field for ``param``, a field of the canonical chat body."""
    for chat, own in RENAMED:
        if param == chat or param.startswith(chat + "."):
            return own + param[len(chat):]
    head, _, rest = param.partition(".")
    if head == "tools":  # tools.2.function.parameters -> tools.2.parameters
        return param.replace(".function", "", 1)
    if head != "messages" or not rest:
        return "input" if head == "messages" else param
    k, _, rest = rest.partition(".")
    if not k.isdigit() or int(k) >= len(parsed.origins):
        return "input"
    origin = parsed.origins[int(k)]
    if rest.startswith("tool_calls."):
        j, _, below = rest[len("tool_calls."):].partition(".")
        origin = parsed.call_origins.get((int(k), int(j)) if j.isdigit() else (-1, -1), origin)
        below = _CALL_FIELDS.get(below, below)
        rest = below
    if origin in ("instructions", "previous_response_id") or not rest:
        return origin
    return f"{origin}.{rest}"


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
        params = tool.get("parameters")
        if isinstance(params, dict) and params.get("type", "object") != "object":
            raise _bad(f"a function's parameters must be a JSON Schema of type 'object', not "
                       f"{str(params.get('type'))[:40]!r}", f"tools.{i}.parameters.type")
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
        if not isinstance(fmt.get("name"), str) or not fmt["name"]:
            raise _bad("a json_schema format needs a 'name'", "text.format.name", "missing_required_parameter")
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
    for name, instead in CHAT_ONLY.items():
        if name in raw:
            hint = f"; use '{instead}'" if instead else ""
            raise _bad(f"a Chat Completions field that the Responses API does not have{hint}", name,
                       "unsupported_parameter")
    for name in ("stream", "parallel_tool_calls", "store"):
        if raw.get(name) is not None and not isinstance(raw[name], bool):
            raise _bad("must be a boolean", name)
    if "input" not in raw:
        raise _bad("is required", "input", "missing_required_parameter")
    items = input_items(raw["input"])
    check_calls(history, items)
    instructions = raw.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise _bad("must be a string", "instructions")
    origins: list[str] = []
    call_origins: dict[tuple[int, int], str] = {}
    body: dict[str, Any] = {"messages": messages(instructions, history + items, origins, call_origins, len(history))}
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
    if metadata is not None and not (isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values())):
        raise _bad("must be an object of string values", "metadata")
    echo = {"instructions": instructions, "tools": raw.get("tools") or [], "tool_choice": raw.get("tool_choice", "auto"),
            "text": raw.get("text") or {"format": {"type": "text"}}, "metadata": metadata or {},
            "max_output_tokens": raw.get("max_output_tokens"), "temperature": raw.get("temperature"),
            "top_p": raw.get("top_p"), "user": raw.get("user"), "reasoning": reasoning,
            "parallel_tool_calls": raw.get("parallel_tool_calls", True),
            "previous_response_id": raw.get("previous_response_id"), "store": raw.get("store", True)}
    return ParsedRequest(body=body, input_items=items, echo=echo, origins=origins, call_origins=call_origins)
