"""Block hashes of a prompt, as the gateway approximates vLLM's prefix cache.

vLLM's automatic prefix caching hashes the KV cache in fixed blocks of tokens (16 by
default), each block's hash covering the block's tokens *and* its parent block's hash, so
block ``i`` matches only if the whole prefix up to it matches; only full blocks are
cached (vLLM design docs, "Automatic Prefix Caching").

The gateway has no tokenizer for the served model, so it uses a stand-in: the prompt is
rendered as text (:func:`prompt_text`: tools as JSON, then each message as
``role\\ncontent\\n``) and cut into blocks of ``block_tokens x CHARS_PER_TOKEN``
characters (4 characters per token, the estimate of
:func:`backends.openai_shapes.estimate_tokens`). Block boundaries therefore do not line up
with the replica's, but they do not need to: affinity only needs "same prefix, same
hashes", and two prompts that share ``k`` characters share about ``k / 64`` leading block
hashes here and about as many tokens' worth of KV blocks on the replica.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import orjson

CHARS_PER_TOKEN = 4
BLOCK_TOKENS = 16


def prompt_text(body: dict) -> str:
    """The text a request's prompt is rendered to for hashing (see the module docstring)."""
    if "messages" not in body:
        prompt = body.get("prompt", "")
        return prompt if isinstance(prompt, str) else orjson.dumps(prompt).decode()
    parts = []
    if body.get("tools"):
        parts.append(orjson.dumps(body["tools"]).decode())
    for m in body.get("messages") or []:
        if not isinstance(m, dict):
            continue
        content = m.get("content")
        text = content if isinstance(content, str) else orjson.dumps(content).decode()
        parts.append(f"{m.get('role')}\n{text}\n")
    return "".join(parts)


def chained_hashes(chunks: Iterable[bytes]) -> list[int]:
    """64-bit hashes of consecutive blocks, each over (parent hash, block bytes)."""
    out, parent = [], b""
    for chunk in chunks:
        digest = hashlib.blake2b(parent + chunk, digest_size=8).digest()
        out.append(int.from_bytes(digest, "big"))
        parent = digest
    return out


def block_hashes(body: dict, block_tokens: int = BLOCK_TOKENS) -> list[int]:
    """Hashes of the full blocks of a request's prompt (a trailing partial block is not
    hashed, as vLLM does not cache it)."""
    data = prompt_text(body).encode()
    size = block_tokens * CHARS_PER_TOKEN
    return chained_hashes(data[i:i + size] for i in range(0, len(data) - size + 1, size))
