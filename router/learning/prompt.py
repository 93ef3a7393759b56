"""The key that recognises the same prompt sent again (an implicit retry signal)."""

from __future__ import annotations

import hashlib


def prompt_key(text: str) -> str:
    """A short hash of the prompt text the classifier reads (all message text, joined):
    16 hex digits of BLAKE2b, recorded as the decision's ``signals.prompt_hash``. The text
    itself is never stored."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()
