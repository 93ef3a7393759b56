"""Small builders of OpenAI response objects shared by the backends that synthesize
answers (fake, replay). Shapes follow the OpenAI API reference for ``chat.completion``,
``chat.completion.chunk`` and ``text_completion``.
"""

from __future__ import annotations

import time
import uuid

import orjson


def estimate_tokens(text: str) -> int:
    """Token estimate used where no tokenizer is available offline: ceil(chars / 4),
    the rule of thumb OpenAI documents for English text (at least 1 for non-empty text)."""
    return (len(text) + 3) // 4


def embedding_inputs(body: dict) -> list[str | list[int]]:
    """The inputs of an embeddings request body, one per vector asked for: ``input`` as a
    string, a list of strings, one list of token ids (one input) or a list of token-id lists
    (OpenAI API reference, embeddings). Items of other types are left out (the door refuses
    such bodies before routing)."""
    value = body.get("input")
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        return []
    if value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return [value]
    return [v for v in value if isinstance(v, (str, list))]


def embedding_tokens(item: str | list[int]) -> int:
    """Tokens of one embedding input: its length for token ids, else :func:`estimate_tokens`."""
    return len(item) if isinstance(item, list) else estimate_tokens(item)


def prompt_text(endpoint: str, body: dict) -> str:
    """All prompt text of a request body (chat messages, completion prompt or embedding
    inputs, token ids written out as numbers), joined."""
    if endpoint == "embeddings":
        return "\n".join(i if isinstance(i, str) else " ".join(map(str, i)) for i in embedding_inputs(body))
    if endpoint == "chat":
        parts = []
        for m in body.get("messages", []):
            content = m.get("content")
            if isinstance(content, str):
                parts.append(content)
            elif isinstance(content, list):
                parts.extend(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
        return "\n".join(parts)
    prompt = body.get("prompt", "")
    return prompt if isinstance(prompt, str) else "\n".join(map(str, prompt))


def stable_prefix_text(body: dict) -> str:
    """The text of a chat body's stable prefix (system/developer messages and tool
    definitions), the part a prefix cache can hold across requests."""
    parts = [m.get("content") for m in body.get("messages") or () if isinstance(m, dict)
             and m.get("role") in ("system", "developer") and isinstance(m.get("content"), str)]
    if body.get("tools"):
        parts.append(orjson.dumps(body["tools"]).decode())
    return "\n".join(parts)


def prompt_tokens(endpoint: str, body: dict, text: str) -> int:
    """Estimated prompt tokens of a request (:func:`estimate_tokens`):
    its ``text`` plus, for chat, the JSON of its tool definitions (``tools``, legacy
    ``functions``) and of its messages' ``tool_calls``, which providers bill as prompt tokens
    too (they are not text the classifier reads)."""
    tokens = estimate_tokens(text)
    if endpoint != "chat":
        return tokens
    extra = [body[k] for k in ("tools", "functions") if body.get(k)]
    extra += [m["tool_calls"] for m in body.get("messages") or () if isinstance(m, dict) and m.get("tool_calls")]
    if extra:
        try:
            tokens += estimate_tokens(orjson.dumps(extra).decode())
        except TypeError:  # not JSON (the schema refuses such bodies before routing)
            pass
    return tokens


def completions_asked(endpoint: str, body: dict) -> int:
    """How many completions a request body asks the model to generate (and the provider
    bills): ``n`` for chat; for legacy completions ``max(n, best_of)`` per prompt, one
    prompt per entry of a ``prompt`` list of strings or of token lists (a string or one
    list of token ids is one prompt). Invalid values count as 1 (the schema refuses them
    before routing)."""
    def count(name: str) -> int:
        value = body.get(name)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1

    if endpoint == "chat":
        return count("n")
    prompt = body.get("prompt")
    prompts = len(prompt) if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int) else 1
    return prompts * max(count("n"), count("best_of"))


def max_tokens_asked(body: dict) -> int | None:
    """The output-token limit of one completion a request body sets (``max_completion_tokens``,
    else ``max_tokens``), or ``None`` without a valid one (a positive whole number; the
    schema refuses others before routing)."""
    limit = body.get("max_completion_tokens") or body.get("max_tokens")
    return limit if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0 else None


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> dict:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


def embedding_list(model: str, vectors: list[list[float]], prompt_tokens: int) -> dict:
    """OpenAI's embeddings answer: one ``embedding`` object per vector, in input order."""
    return {"object": "list", "model": model,
            "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)],
            "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}}


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def chat_completion(model: str, message: dict, finish_reason: str, use: dict, n: int = 1) -> dict:
    return {
        "id": new_id("chatcmpl"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": i, "message": message, "logprobs": None, "finish_reason": finish_reason} for i in range(n)],
        "usage": use,
    }


def text_completion(model: str, text: str, finish_reason: str, use: dict, n: int = 1) -> dict:
    return {
        "id": new_id("cmpl"),
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": i, "text": text, "logprobs": None, "finish_reason": finish_reason} for i in range(n)],
        "usage": use,
    }


def chat_chunk(cid: str, model: str, delta: dict, finish_reason: str | None = None, index: int = 0) -> dict:
    return {
        "id": cid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
        "choices": [{"index": index, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
    }


def text_chunk(cid: str, model: str, text: str, finish_reason: str | None = None, index: int = 0) -> dict:
    return {
        "id": cid, "object": "text_completion", "created": int(time.time()), "model": model,
        "choices": [{"index": index, "text": text, "logprobs": None, "finish_reason": finish_reason}],
    }


def usage_chunk(cid: str, model: str, obj: str, use: dict) -> dict:
    return {"id": cid, "object": obj, "created": int(time.time()), "model": model, "choices": [], "usage": use}


class ShapeError(ValueError):
    """An upstream answer or stream chunk that is not shaped like the OpenAI API's."""


_TOKEN_FIELDS = ("prompt_tokens", "completion_tokens", "total_tokens")


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_usage(usage: object) -> None:
    if usage is None:
        return
    if not isinstance(usage, dict):
        raise ShapeError("'usage' is not an object")
    for name in _TOKEN_FIELDS:
        value = usage.get(name)
        if value is not None and not _is_count(value):
            raise ShapeError(f"'usage.{name}' is not a non-negative integer")
    details = usage.get("prompt_tokens_details")
    if details is not None:
        cached = details.get("cached_tokens") if isinstance(details, dict) else "?"
        if cached is not None and not _is_count(cached):
            raise ShapeError("'usage.prompt_tokens_details.cached_tokens' is not a non-negative integer")


def _check_choice(choice: object, part: str) -> None:
    if not isinstance(choice, dict):
        raise ShapeError("a choice is not an object")
    if part in choice and choice[part] is not None and not isinstance(choice[part], dict):
        raise ShapeError(f"a choice's '{part}' is not an object")
    inner = choice.get(part) or {}
    if inner.get("content") is not None and not isinstance(inner.get("content"), str):
        raise ShapeError(f"a choice's '{part}.content' is not a string")
    calls = inner.get("tool_calls")
    if calls is not None and not (isinstance(calls, list) and all(isinstance(c, dict) for c in calls)):
        raise ShapeError(f"a choice's '{part}.tool_calls' is not a list of objects")
    if choice.get("text") is not None and not isinstance(choice.get("text"), str):
        raise ShapeError("a choice's 'text' is not a string")


def check_completion(endpoint: str, body: dict) -> None:
    """Check the parts of a non-streaming upstream answer the gateway reads: ``choices`` a
    non-empty list of objects (chat: each with a ``message`` object whose ``content`` is a
    string or null and whose ``tool_calls``, if any, is a list of objects; completions:
    ``text`` a string), ``usage`` token counts non-negative
    integers; an embeddings answer as :func:`check_embeddings`. Other fields are not
    checked and pass through.

    Raises:
        ShapeError: the first problem found.
    """
    if endpoint == "embeddings":
        check_embeddings(body)
        return
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices:
        raise ShapeError("'choices' is missing or not a non-empty list")
    for choice in choices:
        _check_choice(choice, "message")
        if endpoint == "chat" and not isinstance(choice.get("message"), dict):
            raise ShapeError("a choice has no 'message' object")
        if endpoint == "completions" and not isinstance(choice.get("text"), str):
            raise ShapeError("a choice has no 'text' string")
    _check_usage(body.get("usage"))


def check_embeddings(body: dict) -> None:
    """Check an upstream embeddings answer:
    ``data`` a non-empty list of objects, each with an integer ``index`` and an
    ``embedding`` list of numbers (the gateway asks for floats and encodes base64 itself),
    ``usage`` token counts non-negative integers.

    Raises:
        ShapeError: the first problem found.
    """
    data = body.get("data")
    if not isinstance(data, list) or not data:
        raise ShapeError("'data' is missing or not a non-empty list")
    for item in data:
        if not isinstance(item, dict) or not _is_count(item.get("index")):
            raise ShapeError("an embedding is not an object with an integer 'index'")
        vector = item.get("embedding")
        if not isinstance(vector, list) or not all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                                   for x in vector):
            raise ShapeError("an 'embedding' is not a list of numbers")
    _check_usage(body.get("usage"))


def check_chunk(chunk: dict) -> None:
    """Check the parts of one upstream stream chunk the gateway reads: ``choices`` a list of
    objects (may be empty: the usage chunk) whose ``delta`` is an object with a string or
    null ``content`` and whose ``text`` is a string or null; ``usage`` as
    :func:`check_completion`.

    Raises:
        ShapeError: the first problem found.
    """
    choices = chunk.get("choices")
    if choices is not None and not isinstance(choices, list):
        raise ShapeError("'choices' is not a list")
    for choice in choices or ():
        _check_choice(choice, "delta")
    _check_usage(chunk.get("usage"))
