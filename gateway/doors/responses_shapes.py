"""Shapes of the OpenAI Responses API that the door renders: the response object, its output
items and usage, as the openai SDK reads them (``openai/types/responses/response.py``,
``response_output_message.py``, ``response_function_tool_call.py``, ``response_usage.py``)."""

from __future__ import annotations

import hashlib
import time
import uuid

from backends.response import Answer, Usage

INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}
"""Chat ``finish_reason`` -> the Responses ``incomplete_details.reason`` it means."""


def new_id(prefix: str) -> str:
    """A fresh id of a Responses object: ``resp_``, ``msg_``, ``fc_``, ``rs_`` and 32 hex digits."""
    return f"{prefix}_{uuid.uuid4().hex}"


def message_item(item_id: str, text: str, status: str = "completed", refusal: str | None = None) -> dict:
    """An assistant ``message`` output item with one ``output_text`` part (or a ``refusal``)."""
    part = ({"type": "refusal", "refusal": refusal} if refusal is not None
            else {"type": "output_text", "text": text, "annotations": [], "logprobs": []})
    return {"type": "message", "id": item_id, "role": "assistant", "status": status, "content": [part]}


def function_call_item(item_id: str, call_id: str, name: str, arguments: str, status: str = "completed") -> dict:
    """A ``function_call`` output item; ``call_id`` is the chat tool call's ``id``."""
    return {"type": "function_call", "id": item_id, "call_id": call_id, "name": name, "arguments": arguments,
            "status": status}


def reasoning_item(item_id: str, text: str, status: str = "completed") -> dict:
    """A ``reasoning`` output item holding the model's reasoning text."""
    return {"type": "reasoning", "id": item_id, "summary": [], "content": [{"type": "reasoning_text", "text": text}],
            "status": status}


_LISTED_PREFIX = {"message": "msg", "function_call": "fc", "function_call_output": "fco", "reasoning": "rs"}


def listed_item(item: dict, response_id: str, index: int) -> dict:
    """A stored input item as ``GET /v1/responses/{id}/input_items`` lists it: with an ``id``
    (the client's, else one derived from the response and the item's place, so that it is
    the same on every read and ``after`` can page by it), a ``status``, and a message's
    content as parts (a string is one ``input_text`` part, ``output_text`` for the assistant)."""
    kind = item.get("type", "message")
    digest = hashlib.sha256(f"{response_id}:{index}".encode()).hexdigest()[:32]
    out = {"id": item.get("id") or f"{_LISTED_PREFIX.get(kind, 'item')}_{digest}", "type": kind, **{
        k: v for k, v in item.items() if k not in ("id", "type")}}
    if kind == "message":
        content = item.get("content")
        if isinstance(content, str):
            part = "output_text" if item.get("role") == "assistant" else "input_text"
            out["content"] = [{"type": part, "text": content, **({"annotations": []} if part == "output_text" else {})}]
    if kind != "reasoning":
        out.setdefault("status", "completed")
    return out


def output_items(answer: Answer) -> list[dict]:
    """The output items of an answer: its reasoning, its text (or refusal), then each of its
    tool calls; one empty message when it has no text or call."""
    items = [reasoning_item(new_id("rs"), answer.reasoning)] if answer.reasoning else []
    if answer.text or answer.refusal:
        items.append(message_item(new_id("msg"), answer.text, refusal=answer.refusal if not answer.text else None))
    for call in answer.tool_calls:
        items.append(function_call_item(new_id("fc"), call.id or new_id("call"), call.name, call.arguments))
    if not any(i["type"] != "reasoning" for i in items):  # an empty answer is an empty message
        items.append(message_item(new_id("msg"), ""))
    return items


def usage(used: Usage) -> dict:
    """Responses usage: ``input_tokens`` counts the whole prompt, as OpenAI's does; of it,
    ``input_tokens_details.cached_tokens`` were read from the provider's prompt cache and
    ``cache_write_tokens`` written to it. The gateway's ``cost_usd`` (USD) is kept where the
    usage has it (a stream's, as chat streams report it in their usage chunk)."""
    out = {"input_tokens": used.prompt_tokens,
           "input_tokens_details": {"cached_tokens": used.cached_tokens, "cache_write_tokens": used.cache_write_tokens},
           "output_tokens": used.output_tokens, "output_tokens_details": {"reasoning_tokens": used.reasoning_tokens},
           "total_tokens": used.total_tokens}
    if used.cost_usd is not None:
        out["cost_usd"] = used.cost_usd
    return out


def response_object(response_id: str, echo: dict, model: str, output: list[dict], *, status: str = "completed",
                    finish_reason: str | None = None, usage_: dict | None = None, created_at: int | None = None,
                    error: dict | None = None) -> dict:
    """The ``response`` object.

    Args:
        response_id: ``resp_...``.
        echo: the request fields it repeats (:attr:`ParsedRequest.echo`).
        model: the model that answered (or, before it is known, the one asked for).
        output: its output items.
        status: ``completed``, ``in_progress`` or ``failed``; a completed response whose
            chat ``finish_reason`` was ``length`` or ``content_filter`` becomes ``incomplete``.
        usage_: Responses usage (:func:`usage`), ``None`` while streaming.
    """
    created = created_at or int(time.time())
    incomplete = INCOMPLETE.get(finish_reason or "") if status == "completed" else None
    if incomplete:
        status = "incomplete"
    return {
        "id": response_id, "object": "response", "created_at": created, "status": status,
        "completed_at": int(time.time()) if status in ("completed", "incomplete") else None,
        "error": error, "incomplete_details": {"reason": incomplete} if incomplete else None,
        "instructions": echo.get("instructions"), "max_output_tokens": echo.get("max_output_tokens"),
        "model": model, "output": output, "parallel_tool_calls": echo.get("parallel_tool_calls", True),
        "previous_response_id": echo.get("previous_response_id"),
        "reasoning": echo.get("reasoning") or {"effort": None, "summary": None},
        "store": echo.get("store", True), "temperature": echo.get("temperature"),
        "text": echo.get("text") or {"format": {"type": "text"}}, "tool_choice": echo.get("tool_choice", "auto"),
        "tools": echo.get("tools") or [], "top_p": echo.get("top_p"), "truncation": "disabled",
        "usage": usage_, "user": echo.get("user"), "metadata": echo.get("metadata") or {}, "background": False,
    }
