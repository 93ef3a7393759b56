"""Prompt rewriting for prefix caches (first step of the request path).

This version keeps the request as sent and computes its ``prefix_hash``: SHA-256 (16 hex
chars) over the canonical JSON (sorted keys) of the stable part of the request: the
system/developer messages, the tool definitions and the response format. Requests that
share it can share a provider or vLLM prefix cache. Reordering of volatile spans comes
with the rewriter of the prefix-cache issue.
"""

from __future__ import annotations

import hashlib

import orjson

_STABLE_ROLES = {"system", "developer"}


def prefix_hash(body: dict) -> str:
    """Hash of the stable prefix of an OpenAI chat or completions body (see module doc)."""
    if "messages" in body:
        stable = {
            "system": [m.get("content") for m in body["messages"] if m.get("role") in _STABLE_ROLES],
            "tools": body.get("tools"),
            "response_format": body.get("response_format"),
        }
    else:
        stable = {"prompt": None}
    raw = orjson.dumps(stable, option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(raw).hexdigest()[:16]


def rewrite(body: dict) -> tuple[dict, str]:
    """Return ``(rewritten_body, prefix_hash)``; the body is returned unchanged here."""
    return body, prefix_hash(body)
