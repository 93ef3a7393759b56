"""Small builders of OpenAI response objects shared by the backends that synthesize
answers (fake, replay). Shapes follow the OpenAI API reference for ``chat.completion``,
``chat.completion.chunk`` and ``text_completion``.
"""

from __future__ import annotations

import time
import uuid


def estimate_tokens(text: str) -> int:
    """Token estimate used where no tokenizer is available offline: ceil(chars / 4),
    the rule of thumb OpenAI documents for English text (at least 1 for non-empty text)."""
    return (len(text) + 3) // 4


def prompt_text(endpoint: str, body: dict) -> str:
    """All prompt text of a request body (chat messages or completion prompt), joined."""
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


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> dict:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


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
