"""Provider prompt-cache hints added to a hosted call (after :mod:`router.rewrite` put the
stable prefix first).

**Anthropic** (litellm provider ``anthropic``): caching needs explicit ``cache_control``
breakpoints. One ``{"type": "ephemeral"}`` breakpoint goes on the last block of the
stable prefix: the last system message of the leading run of system messages (its last
text part), or the last tool when there is no system message. Anthropic's rules (prompt
caching guide): at most :data:`MAX_BREAKPOINTS` breakpoints per request, and a prefix
shorter than the model's minimum (:func:`anthropic_min_tokens`) is not cached at all, so
no breakpoint is added when the client already used all four, when the block already has
one, or when the estimated prefix (chars / 4, see
:func:`backends.openai_shapes.estimate_tokens`) is below the minimum. Hints the client set
are never removed or moved.

**Claude on Bedrock and Vertex AI** (litellm providers ``bedrock`` and ``vertex_ai``, a model
name containing ``claude``): the same breakpoint, by the same rules (AWS's Bedrock prompt
caching guide gives Claude the same four checkpoints and per-model minimums). litellm turns
it into a Converse ``cachePoint`` block after the marked system text on Bedrock
(``AmazonConverseConfig._transform_system_message``) and keeps Anthropic's format on
Vertex AI (``VertexAIAnthropicConfig`` is an ``AnthropicConfig``). Other Bedrock and Vertex
models (Nova, Gemini) get nothing.

**OpenAI** (litellm provider ``openai``): caching is automatic for prompts of 1024+
tokens; ``prompt_cache_key`` steers requests that share a prefix to the same cache
shard. When the client did not set one, it is ``"mr-" + sha256(tenant NUL prefix_hash)``
(24 hex chars: the tenant name is not sent to the provider in clear).

Other providers get nothing. Cached prompt tokens come back in
``usage.prompt_tokens_details.cached_tokens`` (litellm maps Anthropic's
``cache_read_input_tokens`` there), which :func:`backends.pricing.cost_usd` prices at the
cached rate.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from backends.openai_shapes import estimate_tokens

MAX_BREAKPOINTS = 4
EPHEMERAL = {"type": "ephemeral"}
#: litellm providers that also serve Claude models with Anthropic's cache_control breakpoints.
CLAUDE_HOSTS = ("bedrock", "vertex_ai")


def anthropic_min_tokens(model: str) -> int:
    """Minimum cacheable prompt length (tokens) of a Claude model (Anthropic prompt caching
    guide: 4096 for Opus 4.5/4.6 and Haiku 4.5, 2048 for Sonnet 4.6 and Haiku 3/3.5, else
    1024)."""
    m = model.lower().replace(".", "-")
    if any(k in m for k in ("opus-4-5", "opus-4-6", "haiku-4-5")):
        return 4096
    if "sonnet-4-6" in m or "haiku" in m:
        return 2048
    return 1024


def prompt_cache_key(tenant: str | None, prefix_hash: str) -> str:
    """The OpenAI ``prompt_cache_key`` for a tenant's prefix (see the module docstring)."""
    raw = f"{tenant or ''}\x00{prefix_hash}".encode()
    return "mr-" + hashlib.sha256(raw).hexdigest()[:24]


def add_cache_hints(kwargs: dict[str, Any], provider: str, tenant: str | None = None,
                    prefix_hash: str | None = None) -> str | None:
    """Add the provider's hints to litellm call ``kwargs`` in place (copies what it changes).

    Args:
        provider: litellm provider name (``openai``, ``anthropic``, ``bedrock``, ``vertex_ai``, ...).
        tenant, prefix_hash: the call's cache scope (:class:`backends.call.CallContext`);
            no ``prompt_cache_key`` without a prefix hash.

    Returns:
        What was added (``"cache_control"``, ``"prompt_cache_key"``) or ``None``.
    """
    if provider == "anthropic" or (provider in CLAUDE_HOSTS and "claude" in str(kwargs.get("model", "")).lower()):
        return "cache_control" if _anthropic(kwargs) else None
    if provider == "openai" and prefix_hash and "prompt_cache_key" not in kwargs:
        kwargs["prompt_cache_key"] = prompt_cache_key(tenant, str(prefix_hash))
        return "prompt_cache_key"
    return None


def count_breakpoints(kwargs: dict[str, Any]) -> int:
    """``cache_control`` marks already in a call: top level, tools, messages and their parts."""
    n = int(kwargs.get("cache_control") is not None)
    for t in kwargs.get("tools") or []:
        if isinstance(t, dict):
            fn = t.get("function")
            n += int("cache_control" in t or (isinstance(fn, dict) and "cache_control" in fn))
    for m in kwargs.get("messages") or []:
        if not isinstance(m, dict):
            continue
        n += int("cache_control" in m)
        if isinstance(m.get("content"), list):
            n += sum(1 for p in m["content"] if isinstance(p, dict) and "cache_control" in p)
    return n


def _anthropic(kwargs: dict[str, Any]) -> bool:
    messages = kwargs.get("messages")
    if not isinstance(messages, list) or count_breakpoints(kwargs) >= MAX_BREAKPOINTS:
        return False
    tools = kwargs.get("tools") if isinstance(kwargs.get("tools"), list) else []
    last_system = None
    for i, m in enumerate(messages):
        if not (isinstance(m, dict) and m.get("role") == "system"):
            break
        last_system = i
    prefix_chars = len(orjson.dumps(tools)) if tools else 0
    for m in messages[: (last_system + 1) if last_system is not None else 0]:
        content = m.get("content")
        prefix_chars += len(content) if isinstance(content, str) else len(orjson.dumps(content))
    if estimate_tokens("x" * prefix_chars) < anthropic_min_tokens(str(kwargs.get("model", ""))):
        return False
    if last_system is not None:
        marked = _mark_message(messages[last_system])
        if marked is None:
            return False
        kwargs["messages"] = [*messages[:last_system], marked, *messages[last_system + 1:]]
        return True
    if tools and isinstance(tools[-1], dict) and "cache_control" not in tools[-1]:
        kwargs["tools"] = [*tools[:-1], {**tools[-1], "cache_control": dict(EPHEMERAL)}]
        return True
    return False


def _mark_message(m: dict) -> dict | None:
    """``m`` with a breakpoint on its last text block; ``None`` if it has one or no text."""
    if "cache_control" in m:
        return None
    content = m.get("content")
    if isinstance(content, str) and content:
        return {**m, "content": [{"type": "text", "text": content, "cache_control": dict(EPHEMERAL)}]}
    if isinstance(content, list):
        for j in range(len(content) - 1, -1, -1):
            part = content[j]
            if isinstance(part, dict) and "cache_control" in part:
                return None
            if isinstance(part, dict) and part.get("type") == "text":
                return {**m, "content": [*content[:j], {**part, "cache_control": dict(EPHEMERAL)}, *content[j + 1:]]}
    return None
