"""An Anthropic Messages request checked and turned into the canonical Chat Completions body.

The translation is litellm's (``LiteLLMAnthropicMessagesAdapter.translate_anthropic_to_openai``:
``system`` to a first system message, content blocks to chat parts, ``tool_use`` to
``tool_calls``, ``tool_result`` to ``tool`` messages, ``tools``/``tool_choice``,
``stop_sequences`` to ``stop``, ``thinking`` to ``reasoning_effort``, ``metadata.user_id`` to
``user``; ``cache_control`` kept on parts). Written here, because litellm falls short:

- it translates whatever it is given and drops what it does not know without a word (an
  unknown block type, a ``tool_result`` whose ``tool_use`` is not there, an OpenAI field);
  the door must refuse those with a 400 naming the field (:func:`check`);
- it drops a ``document`` block whose source is plain text (``source.type: "text"``) or
  text blocks (``"content"``), so such documents become text parts here first, wrapped in
  ``<document>`` tags, which the rewriter recognises (:mod:`router.rewrite.documents`);
- it drops a message whose content is empty, which Anthropic refuses (but for a final
  assistant message);
- it leaves ``None`` values (``thinking_blocks: null`` on assistant messages) that the chat
  schema and vLLM refuse.

litellm is imported on the first Messages request, not with the gateway: importing it costs
seconds of start-up, which gateways without hosted backends or Messages clients never pay.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from backends.hosted.sdk import load_litellm
from gateway.doors.images import refuse_images
from gateway.doors.messages_shapes import MessagesRequest
from gateway.schemas import validate
from router.errors import InvalidRequest

BLOCKS_BY_ROLE = {
    "user": ("text", "image", "document", "tool_result"),
    "assistant": ("text", "tool_use", "thinking", "redacted_thinking"),
}
"""Content block types each role's messages take (Anthropic's API reference)."""
KNOWN_BLOCKS = frozenset(b for blocks in BLOCKS_BY_ROLE.values() for b in blocks)

OPENAI_ONLY = frozenset({
    "response_format", "n", "frequency_penalty", "presence_penalty", "logprobs", "top_logprobs", "logit_bias",
    "seed", "max_completion_tokens", "functions", "function_call", "stream_options", "parallel_tool_calls",
    "user", "reasoning_effort", "modalities", "audio", "prediction", "stop", "web_search_options", "verbosity",
    "prompt_cache_key", "safety_identifier", "store", "input", "instructions", "max_output_tokens",
    "previous_response_id", "text", "reasoning",
})
"""Fields of OpenAI's Chat Completions or Responses API that the Messages API does not have:
refused, so that a client that mixes the dialects learns it rather than have them ignored."""


def bad(message: str, param: str, code: str = "invalid_value") -> InvalidRequest:
    return InvalidRequest(f"{param}: {message}", param=param, code=code)


def check(raw: dict, schema=MessagesRequest) -> None:
    """Refuse a body that is not a valid Messages request.

    Raises:
        InvalidRequest: an OpenAI-only field, a ``system`` role in ``messages``, an unknown
            content block type or one its role does not take, a server tool, a
            ``tool_result`` without its ``tool_use``, or a breach of the request model
            (:class:`gateway.doors.messages_shapes.MessagesRequest`; a missing
            ``max_tokens`` among them); ``param`` names the field.
    """
    foreign = sorted(OPENAI_ONLY & raw.keys())
    if foreign:
        raise bad("an OpenAI API field that the Messages API does not have", foreign[0], "unsupported_parameter")
    messages = raw.get("messages")
    for i, m in enumerate(messages if isinstance(messages, list) else ()):
        if isinstance(m, dict):
            _check_blocks(m, i, last=i == len(messages) - 1)
    tools = raw.get("tools")
    for i, tool in enumerate(tools if isinstance(tools, list) else ()):
        if isinstance(tool, dict) and tool.get("type") not in (None, "custom"):
            raise bad(f"tool type {str(tool.get('type'))[:60]!r} is not supported (no backend here runs "
                      "Anthropic's server tools); declare client tools with name and input_schema",
                      f"tools.{i}.type", "unsupported_tool_type")
    validate(schema, raw)
    if isinstance(messages, list):
        _check_tool_results(messages)
    choice = raw.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") == "tool":
        names = [t["name"] for t in raw.get("tools") or ()]
        if choice["name"] not in names:
            raise bad(f"no tool named '{choice['name'][:80]}' in 'tools'", "tool_choice.name")


def _check_blocks(m: dict, i: int, last: bool) -> None:
    role = m.get("role")
    if role == "system":
        raise bad("'system' is not a role of the Messages API; send the system prompt in the top-level "
                  "'system' field", f"messages.{i}.role")
    content = m.get("content")
    if content in ("", []) and not (last and role == "assistant"):
        # Anthropic's rule; litellm would drop the message without a word.
        raise bad("must not be empty (only a final assistant message, the start of the answer, may be)",
                  f"messages.{i}.content")
    for j, block in enumerate(content if isinstance(content, list) else ()):
        kind = block.get("type") if isinstance(block, dict) else None
        if not isinstance(kind, str):
            continue  # the request model names the problem
        if kind not in KNOWN_BLOCKS:
            raise bad(f"unknown content block type {kind[:60]!r} (expected one of {', '.join(sorted(KNOWN_BLOCKS))})",
                      f"messages.{i}.content.{j}.type", "unsupported_content_type")
        if role in BLOCKS_BY_ROLE and kind not in BLOCKS_BY_ROLE[role]:
            raise bad(f"{role} messages do not take '{kind}' blocks (they take {', '.join(BLOCKS_BY_ROLE[role])})",
                      f"messages.{i}.content.{j}.type")
        inner = block.get("content") if kind == "tool_result" else None
        for k, part in enumerate(inner if isinstance(inner, list) else ()):
            if isinstance(part, dict) and part.get("type") in ("image", "document"):
                # A tool_result becomes a chat 'tool' message, which carries text only.
                raise bad(f"a tool_result here carries text only, not '{part['type']}' blocks (send the "
                          f"{part['type']} in a block of the user message beside it)",
                          f"messages.{i}.content.{j}.content.{k}.type", "unsupported_content_type")


def _check_tool_results(messages: list[dict]) -> None:
    # Anthropic's rules: each tool_result answers a tool_use of the assistant message just
    # before, and each tool_use of an assistant message is answered in the user message after.
    previous: list[str] = []
    for i, m in enumerate(messages):
        blocks = m["content"] if isinstance(m["content"], list) else []
        if m["role"] == "assistant":
            previous = [b["id"] for b in blocks if b["type"] == "tool_use"]
            continue
        answered = set()
        for j, b in enumerate(blocks):
            if b["type"] == "tool_result":
                if b["tool_use_id"] not in previous:
                    raise bad(f"tool_result for '{b['tool_use_id'][:80]}' has no tool_use with that id in the "
                              "assistant message before it", f"messages.{i}.content.{j}.tool_use_id",
                              "tool_result_without_tool_use")
                answered.add(b["tool_use_id"])
        missing = [t for t in previous if t not in answered]
        if missing:
            raise bad(f"no tool_result for the tool_use '{missing[0][:80]}' of the assistant message before it",
                      f"messages.{i}.content", "tool_use_without_tool_result")
        previous = []


def check_images(raw: dict, policy) -> None:
    """Refuse ``image`` blocks when no backend that
    ``model`` may reach takes them (:func:`gateway.doors.images.refuse_images`).

    Raises:
        InvalidRequest: ``param`` names the first image block.
    """
    refuse_images(_first_image(raw.get("messages")), raw.get("model"), policy)


def _first_image(messages: Any) -> str | None:
    for i, m in enumerate(messages if isinstance(messages, list) else ()):
        content = m.get("content") if isinstance(m, dict) else None
        for j, block in enumerate(content if isinstance(content, list) else ()):
            if not isinstance(block, dict):
                continue
            if block.get("type") == "image":  # (not inside a tool_result: check refused those)
                return f"messages.{i}.content.{j}"
    return None


def to_chat(raw: dict) -> tuple[dict, dict[str, str]]:
    """The canonical chat body of a checked Messages request (``stream`` set as asked), and
    litellm's map of shortened tool names to the client's: Anthropic takes names of up to
    128 characters, OpenAI's chat API 64, so longer ones are shortened on the way in and
    restored in the answer."""
    # Explicit nulls are absent fields in the request model; litellm reads some of them as
    # values (a tool's "type": null fails on .startswith).
    body = _plain_chat(raw)
    if body is not None:
        if raw.get("stream") is True:
            body["stream"] = True
        return body, {}
    request = {k: _without_nulls(v) for k, v in raw.items() if k != "stream" and v is not None}
    request["messages"] = [_documents_as_text(m) for m in request["messages"]]
    # The provider named only keeps litellm from asking its provider registry about the
    # route's name (it prints to stdout when the name is not a model it knows).
    body, names = _adapter().translate_anthropic_to_openai(request, custom_llm_provider="openai")
    body = {k: v for k, v in body.items() if v is not None}
    body["messages"] = [{k: v for k, v in m.items() if v is not None} for m in body["messages"]]
    if raw.get("stream") is True:
        body["stream"] = True
    return body, dict(names or {})


_PLAIN_FIELDS = ("max_tokens", "temperature", "top_p")
_PLAIN_KEYS = frozenset(("model", "messages", "system", "stream", *_PLAIN_FIELDS))


def _plain_chat(raw: dict) -> dict | None:
    """The chat body of a checked request of plain text turns only (user and assistant
    messages of non-empty string content, an optional non-empty string ``system``, and no
    field beyond ``max_tokens``, ``temperature``, ``top_p`` and ``stream``), built here
    without ``stream``; ``None`` for any other request, which litellm translates.

    Why not litellm for these: its translation (which looks the model up in its registry
    to decide whether encrypted reasoning blocks may be replayed) was most of this door's
    cost per request (issue 41, door parity), and such a request has no block, tool or
    field whose translation depends on the model: litellm's result is the same messages
    with the system prompt first (``tests/gateway/test_messages_plain_answer.py`` holds
    the two to the same output).
    """
    if not _PLAIN_KEYS.issuperset(k for k, v in raw.items() if v is not None):
        return None
    system = raw.get("system")
    if system is not None and not (isinstance(system, str) and system):
        return None
    messages = [{"role": "system", "content": system}] if system else []
    for m in raw.get("messages") or ():
        if not (isinstance(m, dict) and len(m) == 2 and m.get("role") in ("user", "assistant")
                and isinstance(m.get("content"), str) and m["content"]):
            return None
        messages.append({"role": m["role"], "content": m["content"]})
    if not messages or messages[-1]["role"] == "system":
        return None
    body = {"model": raw["model"], "messages": messages}
    body.update((k, raw[k]) for k in _PLAIN_FIELDS if raw.get(k) is not None)
    return body


def _without_nulls(value: Any) -> Any:
    """``value`` without null-valued keys in the objects of the request's structure (its
    messages, blocks, tools, tool_choice...); a tool's ``input_schema`` and a ``tool_use``'s
    ``input`` are the client's JSON and kept as sent."""
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    if isinstance(value, dict):
        return {k: v if k in ("input_schema", "input") else _without_nulls(v) for k, v in value.items()
                if v is not None}
    return value


def _documents_as_text(m: dict) -> dict:
    content = m.get("content")
    if not isinstance(content, list) or not any(_text_document(b) for b in content):
        return m
    return {**m, "content": [_document_text(b) if _text_document(b) else b for b in content]}


def _text_document(block: dict) -> bool:
    return block.get("type") == "document" and (block.get("source") or {}).get("type") in ("text", "content")


def _document_text(block: dict) -> dict:
    title = block.get("title")
    head = f'<document title="{title}">' if title else "<document>"
    source = block["source"]
    if source["type"] == "content":  # text blocks (the request model allows no other kind)
        content = source["content"]
        text = content if isinstance(content, str) else "\n".join(b["text"] for b in content)
    else:
        text = source.get("data") or ""
    part: dict[str, Any] = {"type": "text", "text": f"{head}\n{text}\n</document>"}
    if block.get("cache_control") is not None:
        part["cache_control"] = block["cache_control"]
    return part


@cache
def _adapter():
    load_litellm()  # offline-safe, banners off (backends.hosted.sdk)
    from litellm.llms.anthropic.messages.adapters.transformation import LiteLLMAnthropicMessagesAdapter

    # keep_cache_control: the breakpoints travel on chat parts to Anthropic-hosted backends
    # (litellm's Anthropic provider reads them there) and mark the stable prefix.
    return LiteLLMAnthropicMessagesAdapter(keep_cache_control=True)


def from_chat(response: dict, names: dict[str, str] | None = None) -> dict:
    """litellm's Messages ``message`` for a canonical ``chat.completion`` (content blocks,
    ``stop_reason``, usage), tool names restored with ``names`` (:func:`to_chat`); the door
    sets the id, model and usage it knows better (a plain text answer's message has no
    ``usage``)."""
    plain = _plain_text_message(response)
    if plain is not None:
        return plain
    model_response = load_litellm().ModelResponse(**response)
    return dict(_adapter().translate_openai_response_to_anthropic(model_response, tool_name_mapping=names or None))


_PLAIN_STOPS = {"stop": "end_turn", "length": "max_tokens"}
_CHOICE_KEYS = frozenset(("index", "message", "finish_reason", "logprobs"))


def _plain_text_message(response: dict) -> dict | None:
    """The message of an answer that is one choice of text only (role and non-empty string
    content, nothing else set; finished by ``stop`` or ``length``), built here; ``None`` for
    any other answer, which litellm translates.

    Why not litellm for these: building its ``ModelResponse`` and translating it was most
    of this door's cost per request (issue 41, door parity), and for such an answer its
    result is fixed: one text block and the mapped stop reason
    (``tests/gateway/test_messages_plain_answer.py`` holds the two to the same output).
    """
    choices = response.get("choices")
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
        return None
    choice = choices[0]
    reason = choice.get("finish_reason")
    message, stop = choice.get("message"), _PLAIN_STOPS.get(reason) if isinstance(reason, str) else None
    if stop is None or not isinstance(message, dict) or not _CHOICE_KEYS.issuperset(choice):
        return None
    content = message.get("content")
    if not isinstance(content, str) or not content or message.get("role", "assistant") != "assistant":
        return None
    if any(v is not None for k, v in message.items() if k not in ("role", "content")):
        return None
    return {"id": response.get("id"), "type": "message", "role": "assistant",
            "model": response.get("model") or "unknown-model", "stop_sequence": None,
            "content": [{"type": "text", "text": content}], "stop_reason": stop}
