"""Retrieved documents (RAG context): found in system and user text, moved before the
conversation.

A **document** is a block of text delimited by a policy tag (``<document id="7">...
</document>``; default tags ``document`` then ``documents``) or a policy marker pair
(``-----BEGIN DOC-----`` ... ``-----END DOC-----``). Tags and markers are tried in the order
configured and an earlier one wins an overlap, so ``<documents><document>a</document>
<document>b</document></documents>`` yields two documents and the ``<documents>`` wrapper stays
in place; a ``<documents>`` block with no ``<document>`` inside is one document. An opening
tag without its closing tag is not a document.

Where documents are looked for and where they go:

- the **leading system/developer messages** (before the first other message): their
  documents go to a section appended to the last of those messages, after the stable
  instructions. They stay in a system message: moving them to a user message would take
  instructions away from the system role.
- **user messages** (string content or ``text`` parts): their documents go to a section at
  the start of the first user message, before the conversation. They stay in a user
  message: retrieved text from a user turn must not gain the system role's authority.
  Assistant and tool messages are never touched (tool results answer tool calls).

Each document is replaced where it was by a placeholder ``[document-N]`` and appears,
verbatim, in its section under the same label::

    [mixroute: documents; [document-N] marks where each one was sent]
    [document-1]
    <document id="b">...</document>
    [document-2]
    <document id="a">...</document>
    [mixroute: end of documents]

Order within a section: ``sorted`` (by SHA-256 of the document's text: the same documents in
any order or turn give the same section) or ``as_sent`` (order of appearance: a session that
retrieves new documents every turn then only appends to the section). Labels number the
system section first, then the user section. Nothing is dropped: replacing every
placeholder by its labelled document and removing the sections gives the request back.

Left as sent (with a note): requests whose text already contains a section header or a
``[document-N]`` placeholder and new documents (the labels would be ambiguous), more than
:data:`MAX_DOCUMENTS` documents. A request whose text holds placeholders but no new
document is an already rewritten one and is left as it is, silently (idempotence).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal

SECTION_HEADER = "[mixroute: documents; [document-N] marks where each one was sent]"
SECTION_END = "[mixroute: end of documents]"
PLACEHOLDER = re.compile(r"\[document-\d+\]")
MAX_DOCUMENTS = 512
"""More documents than this in one request: all are left where they are (with a note)."""
_SECTION = re.compile(re.escape(SECTION_HEADER) + r"\n.*?" + re.escape(SECTION_END), re.S)


@dataclass(frozen=True)
class DocumentOptions:
    """How to find and place documents (policy ``rewrite.documents``).

    Attributes:
        enabled: move documents; off: they stay where the client put them.
        order: ``sorted`` (by content hash) or ``as_sent``.
        tags: tag names whose blocks are documents, earliest wins an overlap.
        markers: ``(start, end)`` literal delimiter pairs, after the tags.
    """

    enabled: bool = True
    order: Literal["sorted", "as_sent"] = "sorted"
    tags: tuple[str, ...] = ("document", "documents")
    markers: tuple[tuple[str, str], ...] = ()


@dataclass
class Moved:
    """What :func:`move_documents` did: documents moved per origin, and notes."""

    system: int = 0
    user: int = 0
    notes: list[str] = field(default_factory=list)


Finder = Callable[[str], list[tuple[int, int]]]


@lru_cache(maxsize=64)
def finders(tags: tuple[str, ...], markers: tuple[tuple[str, str], ...]) -> tuple[Finder, ...]:
    """One span finder per tag and marker pair, in priority order."""
    out: list[Finder] = []
    for tag in tags:
        t = re.escape(tag)
        out.append(_pairing(re.compile(rf"<{t}(?:\s[^<>]{{0,2000}})?>"), re.compile(rf"</{t}\s*>"), f"</{tag}"))
    for start, end in markers:
        out.append(_pairing(re.compile(re.escape(start)), re.compile(re.escape(end)), end))
    return tuple(out)


def _pairing(opening: re.Pattern[str], closing: re.Pattern[str], needle: str) -> Finder:
    # ``needle``: a literal every closing match contains; a text without it has no span, and
    # most prompts have none, so the two regex scans are skipped (the decision path runs this
    # on every text part).
    def find(text: str) -> list[tuple[int, int]]:
        if needle not in text:
            return []
        # two linear scans, then pairing: no backtracking over unclosed tags
        closes = [m.span() for m in closing.finditer(text)]
        spans, ci, pos = [], 0, 0
        for m in opening.finditer(text):
            if m.start() < pos:
                continue
            while ci < len(closes) and closes[ci][0] < m.end():
                ci += 1
            if ci == len(closes):
                break
            spans.append((m.start(), closes[ci][1]))
            pos = closes[ci][1]
            ci += 1
        return spans
    return find


def find_documents(text: str, options: DocumentOptions) -> list[tuple[int, int]]:
    """Non-overlapping document spans of ``text``, sorted by position (earlier finders win)."""
    taken: list[tuple[int, int]] = []
    for find in finders(options.tags, options.markers):
        for s, e in find(text):
            if not any(s < te and ts < e for ts, te in taken):
                taken.append((s, e))
    return sorted(taken)


def already_rewritten(text: str) -> bool:
    """Whether ``text`` holds a documents section or a ``[document-N]`` placeholder."""
    return SECTION_HEADER in text or PLACEHOLDER.search(text) is not None


def split_section(text: str) -> tuple[str, str, str]:
    """``(before, section, after)`` around the first documents section (``section`` is ``""``
    when there is none)."""
    m = _SECTION.search(text)
    return (text, "", "") if m is None else (text[:m.start()], m.group(), text[m.end():])


def section_text(labelled: list[tuple[str, str]]) -> str:
    """The section carrying ``[(label, document)]`` (format in the module docstring)."""
    lines = [SECTION_HEADER]
    for label, doc in labelled:
        lines += [label, doc]
    return "\n".join([*lines, SECTION_END])


# A text slot is (message index, part index or None); a found document remembers its slot.
Slot = tuple[int, int | None]


def move_documents(messages: list, options: DocumentOptions) -> tuple[list, Moved]:
    """Messages with their documents moved (rules in the module docstring); never mutates
    ``messages``. Returns the input list itself when nothing moved."""
    moved = Moved()
    if not options.enabled:
        return messages, moved
    lead = 0
    while lead < len(messages) and _role(messages[lead]) in ("system", "developer"):
        lead += 1
    groups: dict[str, list[Slot]] = {"system": [], "user": []}
    for i, m in enumerate(messages):
        if i < lead:
            groups["system"] += _slots(m, i)
        elif _role(m) == "user":
            groups["user"] += _slots(m, i)
    texts = {slot: _text(messages, slot) for g in groups.values() for slot in g}
    if any(already_rewritten(t) for t in texts.values()):
        # an already rewritten request (idempotence), unless documents sit outside its sections
        if any(find_documents(_without_sections(t), options) for t in texts.values()):
            moved.notes.append("documents left in place: the request already has [document-N] placeholders "
                               "or a documents section")
        return messages, moved
    found = {slot: find_documents(t, options) for slot, t in texts.items()}
    n = sum(len(v) for v in found.values())
    if n == 0:
        return messages, moved
    if n > MAX_DOCUMENTS:
        moved.notes.append(f"documents left in place: {n} documents (more than {MAX_DOCUMENTS})")
        return messages, moved
    new_texts: dict[Slot, str] = {}
    sections: dict[int, str] = {}
    label = 0
    for name, slots in groups.items():
        docs = [(slot, span) for slot in slots for span in found[slot]]
        if not docs:
            continue
        if options.order == "sorted":
            docs.sort(key=lambda d: hashlib.sha256(texts[d[0]][d[1][0]:d[1][1]].encode()).hexdigest())
        labels: dict[tuple[Slot, tuple[int, int]], str] = {}
        for d in docs:
            label += 1
            labels[d] = f"[document-{label}]"
        for slot in slots:
            if found[slot]:
                new_texts[slot] = _replace(texts[slot], [(s, labels[(slot, s)]) for s in found[slot]])
        # the last leading system message with text, or the first user message with text
        target = max(i for i, _ in slots) if name == "system" else min(i for i, _ in slots)
        sections[target] = section_text([(labels[d], texts[d[0]][d[1][0]:d[1][1]]) for d in docs])
        setattr(moved, name, len(docs))
    out = list(messages)
    for i in {slot[0] for slot in new_texts} | set(sections):
        out[i] = _rebuild(messages[i], i, new_texts, sections.get(i), at_end=i < lead)
    return out, moved


def user_section(messages: list) -> str | None:
    """The documents section of the first user message, if it has one (for the prefix hash)."""
    for i, m in enumerate(messages):
        if _role(m) == "user":
            for slot in _slots(m, i):
                section = split_section(_text(messages, slot))[1]
                if section:
                    return section
            return None
    return None


def _without_sections(text: str) -> str:
    return _SECTION.sub("", text)


def _role(m: object) -> object:
    return m.get("role") if isinstance(m, dict) else None


def _slots(m: dict, i: int) -> list[Slot]:
    content = m.get("content")
    if isinstance(content, str):
        return [(i, None)]
    if isinstance(content, list):
        return [(i, j) for j, p in enumerate(content)
                if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)]
    return []


def _text(messages: list, slot: Slot) -> str:
    i, j = slot
    return messages[i]["content"] if j is None else messages[i]["content"][j]["text"]


def _replace(text: str, spans: list[tuple[tuple[int, int], str]]) -> str:
    out, pos = [], 0
    for (s, e), label in spans:
        out += [text[pos:s], label]
        pos = e
    return "".join([*out, text[pos:]])


def _rebuild(m: dict, i: int, new_texts: dict[Slot, str], section: str | None, *, at_end: bool) -> dict:
    content = m["content"]
    if isinstance(content, str):
        text = new_texts.get((i, None), content)
        if section is not None:
            text = (f"{text}\n\n{section}" if at_end else f"{section}\n\n{text}") if text else section
        return {**m, "content": text}
    parts = [{**p, "text": new_texts[(i, j)]} if (i, j) in new_texts else p for j, p in enumerate(content)]
    if section is not None:
        part = {"type": "text", "text": section}
        parts = [*parts, part] if at_end else [part, *parts]
    return {**m, "content": parts}
