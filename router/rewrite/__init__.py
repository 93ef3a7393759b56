"""Prompt rewriting for prefix caches (first step of the request path).

Provider and vLLM prefix caches need an exact prefix match: a timestamp or request id in
the system prompt, or tools listed in another order, turn every request into a miss. The
rewriter puts a request in a canonical form with the stable part first and the volatile
part last, and hashes the stable prefix (``prefix_hash``):

- :mod:`router.rewrite.canonical` — canonical JSON of tools and response schemas,
  whitespace of system prompts;
- :mod:`router.rewrite.volatile` — detectors of volatile spans (timestamps, dates, UUIDs,
  request ids, policy regexes) and their placeholders;
- :mod:`router.rewrite.documents` — retrieved documents moved before the conversation,
  in a stable order;
- :mod:`router.rewrite.core` — :func:`rewrite`, which never raises and reports what it
  left as sent.

``body, prefix_hash = rewrite(body)`` still works: :class:`RewriteResult` unpacks as that
pair.
"""

from router.rewrite.core import (
    NOTE_HEADER,
    RewriteOptions,
    RewriteResult,
    note_text,
    prefix_hash,
    rewrite,
)
from router.rewrite.documents import DocumentOptions

__all__ = ["DocumentOptions", "NOTE_HEADER", "RewriteOptions", "RewriteResult", "note_text", "prefix_hash", "rewrite"]
