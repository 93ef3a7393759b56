"""The rewrite itself: an OpenAI request body in, its prefix-cache-friendly form out.

What changes (chat bodies; a completions body only gets its ``prefix_hash``):

0. Retrieved documents (``<document>`` blocks, policy markers) in the leading system
   messages and in user messages move, each replaced by a placeholder ``[document-N]``,
   to a section after the stable system prompt (system documents) or at the start of the
   first user message (user documents), in a stable order
   (:mod:`router.rewrite.documents`). The documents are kept verbatim: neither whitespace
   nor volatile-span rules apply inside a section.
1. ``tools`` / ``functions`` and ``response_format`` in canonical JSON
   (:mod:`router.rewrite.canonical`).
2. System and developer message text (string content, or the ``text`` parts of a content
   list) in canonical whitespace, with volatile spans (:mod:`router.rewrite.volatile`)
   replaced by placeholders ``[kind-N]``.
3. The moved values go in one note, appended to the **last user message** (a text part
   for list content; a new user message at the end when there is none)::

       [mixroute: values of the placeholders in the system prompt]
       [timestamp-1] = 2025-06-01T10:04:05Z
       [request-id-1] = req_8f3a21c9

   Why the last user message and not a trailing system message: chat templates of many
   open models (Mistral, Gemma, ...) reject a system message that is not first, and
   litellm folds every system message into Anthropic's top-level ``system``, which would
   put the volatile values back in front of the conversation. The last user message is
   after the stable prefix for every provider and template.

Nothing is dropped: every moved value is in the note, in order, and every other character
of the system prompt is kept except whitespace changed by the normalisation (property
tests in ``tests/rewrite``). Rewriting twice equals rewriting once. The input body is never
mutated. Parts the rewriter cannot handle safely (non-text content parts, malformed or huge
tool lists, non-dict messages) are left as sent and listed in ``notes``; any unexpected
exception returns the body as sent with a note, so :func:`rewrite` never raises.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import orjson

from backends.openai_shapes import breakpoint_messages, unmarked
from router.rewrite.canonical import CannotCanonicalise, canonical_response_format, canonical_tools, normalise_whitespace
from router.rewrite.documents import DocumentOptions, move_documents, split_section, user_section
from router.rewrite.volatile import BUILTIN, compile_patterns, find_spans, replace_spans

log = logging.getLogger(__name__)

STABLE_ROLES = frozenset({"system", "developer"})
NOTE_HEADER = "[mixroute: values of the placeholders in the system prompt]"


@dataclass(frozen=True)
class RewriteOptions:
    """How to rewrite one request.

    Attributes:
        enabled: the route's ``rewrite`` switch; off: the body is only hashed.
        volatile_patterns: extra regexes (policy ``rewrite.volatile_patterns``).
        documents: where documents are found and how they are ordered (policy
            ``rewrite.documents``).
    """

    enabled: bool = True
    volatile_patterns: tuple[str, ...] = ()
    documents: DocumentOptions = DocumentOptions()


@dataclass
class RewriteResult:
    """The rewritten body and what was done. Unpacks as ``(body, prefix_hash)``.

    Attributes:
        body: the body to dispatch (the input object itself when nothing changed).
        prefix_hash: 16 hex chars of SHA-256 over the canonical stable prefix.
        enabled: whether rewriting was on for this request.
        moved: volatile values moved, per kind (counts only: values are prompt content).
        documents: documents moved, per origin (``{"system": n, "user": m}``; empty when
            none moved).
        notes: what was left as sent, and why.
    """

    body: dict
    prefix_hash: str
    enabled: bool = True
    moved: dict[str, int] = field(default_factory=dict)
    documents: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def __iter__(self):
        return iter((self.body, self.prefix_hash))

    def signals(self) -> dict[str, Any]:
        """JSON-ready summary for the decision record (``signals["rewrite"]``)."""
        return {"enabled": self.enabled, "moved": dict(self.moved), "documents": dict(self.documents),
                "notes": list(self.notes)}


def prefix_hash(body: dict) -> str:
    """SHA-256 (16 hex chars) over the canonical JSON (sorted keys) of the stable part of a
    chat body: system/developer message contents (with their documents section),
    ``tools``, ``response_format``, the documents section of the first user message, and
    the conversation up to the client's last ``cache_control`` breakpoint when that lies
    after the system messages (:func:`backends.openai_shapes.breakpoint_messages`). ``cache_control`` marks
    themselves are left out, so that one prompt hashes alike from every door. Requests that
    share it can share a provider or vLLM prefix cache."""
    messages = body.get("messages")
    if isinstance(messages, list):
        stable = {
            "system": [unmarked(m.get("content")) for m in messages
                       if isinstance(m, dict) and m.get("role") in STABLE_ROLES],
            "tools": unmarked(body.get("tools")),
            "response_format": body.get("response_format"),
        }
        documents = user_section(messages)
        if documents is not None:  # only then: hashes of bodies without documents stay as they were
            stable["documents"] = documents
        marked = breakpoint_messages(messages)
        if marked:  # likewise: only bodies with such a breakpoint hash differently
            stable["through_breakpoint"] = [[m.get("role"), unmarked(m.get("content")), m.get("tool_calls"),
                                             m.get("tool_call_id")] for m in marked]
    else:
        stable = {"prompt": None}
    raw = orjson.dumps(stable, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
    return hashlib.sha256(raw).hexdigest()[:16]


def rewrite(body: dict, options: RewriteOptions | None = None) -> RewriteResult:
    """Rewrite ``body`` for prefix caches (see the module docstring); never raises."""
    options = options or RewriteOptions()
    try:
        if not options.enabled:
            return RewriteResult(body, prefix_hash(body), enabled=False)
        return _rewrite(body, _detectors(tuple(options.volatile_patterns)), options.documents)
    except Exception as exc:  # noqa: BLE001  # the rewrite is an optimisation: it must never fail a request
        log.warning("rewrite failed (%s); request left as sent", type(exc).__name__)
        try:
            phash = prefix_hash(body)
        except Exception:  # noqa: BLE001
            phash = "0" * 16
        return RewriteResult(body, phash, enabled=options.enabled,
                             notes=[f"rewrite failed ({type(exc).__name__}); request left as sent"])


@lru_cache(maxsize=64)
def _detectors(patterns: tuple[str, ...]) -> tuple[tuple[str, Any], ...]:
    return (*BUILTIN, *compile_patterns(patterns))


def _rewrite(body: dict, detectors: Sequence[tuple[str, Any]], doc_options: DocumentOptions,
             ) -> RewriteResult:
    messages = body.get("messages")
    if not isinstance(messages, list):
        return RewriteResult(body, prefix_hash(body))
    out, notes = dict(body), []
    messages, docs = move_documents(messages, doc_options)
    notes += docs.notes
    for key, fn in (("tools", canonical_tools), ("functions", canonical_tools),
                    ("response_format", canonical_response_format)):
        if body.get(key) is not None:
            try:
                out[key] = fn(body[key])
            except CannotCanonicalise as exc:
                notes.append(f"{key} left as sent: {exc}")
    state = _Moves(detectors, left=MAX_SCAN_CHARS)
    new_messages = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            notes.append(f"messages[{i}] left as sent: not an object")
        elif m.get("role") in STABLE_ROLES:
            m = _stable_message(m, i, state, notes)
        new_messages.append(m)
    if state.skipped:
        notes.append(f"volatile values not looked for in {state.skipped} text(s) of the system prompt: over "
                     f"the {MAX_SCAN_CHARS:,}-character scan limit per request (left in place)")
    moved = state.moved
    if moved:
        new_messages = _with_note(new_messages, moved)
    out["messages"] = new_messages
    kinds: dict[str, int] = {}
    for name, _ in moved:
        kind = name[1:].rsplit("-", 1)[0]
        kinds[kind] = kinds.get(kind, 0) + 1
    documents = {k: n for k, n in (("system", docs.system), ("user", docs.user)) if n}
    return RewriteResult(out, prefix_hash(out), moved=kinds, documents=documents, notes=notes)


def _stable_message(m: dict, i: int, state: _Moves, notes: list[str]) -> dict:
    content = m.get("content")
    if isinstance(content, str):
        return {**m, "content": _stable_text(content, state)}
    if not isinstance(content, list):
        if content is not None:
            notes.append(f"messages[{i}].content left as sent: not text")
        return m
    parts = []
    for j, part in enumerate(content):
        if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
            part = {**part, "text": _stable_text(part["text"], state)}
        else:
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            notes.append(f"messages[{i}].content[{j}] left as sent: non-text part ({kind})")
        parts.append(part)
    return {**m, "content": parts}


def _stable_text(text: str, state: _Moves) -> str:
    before, section, after = split_section(text)
    if section:  # documents are kept verbatim: a date in a document is not a volatile value
        pieces = (_stable_text(before, state), section, _stable_text(after, state))
        return "\n\n".join(p for p in pieces if p)
    if len(text) > state.left:
        state.skipped += 1
        return text
    state.left -= len(text)
    text, spans = _scan(text, state.detectors)
    if not spans:
        return text
    text, pairs = replace_spans(text, spans, state.counters)
    state.moved.extend(pairs)
    return text


MAX_SCAN_CHARS = 200_000
"""Most characters of system/developer text searched for volatile values per request
(about 50k tokens; a 1-3k-token system prompt is 4-12k characters). The search runs on the
event loop (every detector over the whole text, linear in its length), so a client sending a multi-megabyte system prompt would stall every other
request for seconds; a text that would go over the limit is left in place, unscanned
(whitespace too), and the decision's rewrite notes say so."""


@dataclass
class _Moves:
    """One request's volatile-value rewrite so far."""

    detectors: Sequence[tuple[str, Any]]
    left: int  # characters that may still be scanned (MAX_SCAN_CHARS at the start)
    counters: dict[str, int] = field(default_factory=dict)  # placeholders given per kind
    moved: list[tuple[str, str]] = field(default_factory=list)  # (placeholder, value), in order
    skipped: int = 0  # texts left unscanned


@lru_cache(maxsize=256)
def _scan(text: str, detectors: tuple) -> tuple[str, tuple]:
    """Normalised text and its volatile spans. Cached: the same system prompts come back
    request after request (that is the point of a prefix cache), and scanning a 3k-token
    prompt with every detector costs milliseconds."""
    text = normalise_whitespace(text)
    return text, tuple(find_spans(text, detectors))


def note_text(moved: Sequence[tuple[str, str]]) -> str:
    """The note carrying moved values (format in the module docstring)."""
    return "\n".join([NOTE_HEADER, *(f"{name} = {value}" for name, value in moved)])


def _with_note(messages: list, moved: list[tuple[str, str]]) -> list:
    note = note_text(moved)
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if not (isinstance(m, dict) and m.get("role") == "user"):
            continue
        content = m.get("content")
        if isinstance(content, str):
            new = {**m, "content": f"{content}\n\n{note}" if content else note}
        elif isinstance(content, list):
            new = {**m, "content": [*content, {"type": "text", "text": note}]}
        else:
            continue
        return [*messages[:i], new, *messages[i + 1:]]
    return [*messages, {"role": "user", "content": note}]
