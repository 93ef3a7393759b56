"""Hypothesis invariants of the rewriter: no fact is lost, rewriting is idempotent, the
prefix hash ignores volatile values and the turn and order of retrieved documents, and
nothing raises."""

from __future__ import annotations

import re
from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from router.rewrite import NOTE_HEADER, DocumentOptions, RewriteOptions, rewrite
from router.rewrite.documents import SECTION_END, SECTION_HEADER

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Stable words avoid hex letters and digits, so no stable text can look volatile.
words = st.text(alphabet="ghijklmnopqrstuvwxyzGHIJKLMNOPQRSTUVWXYZ.,;()!?", min_size=1, max_size=12)
spaces = st.sampled_from([" ", "  ", "\t", "\n", "\r\n", "\n\n\n\n", " \n "])
hexs = st.text(alphabet="0123456789abcdef", min_size=8, max_size=24).filter(lambda s: any(c.isdigit() for c in s))
timestamps = st.builds(
    lambda y, mo, d, h, mi, s, z: f"{y:04d}-{mo:02d}-{d:02d}T{h:02d}:{mi:02d}:{s:02d}{z}",
    st.integers(1990, 2099), st.integers(1, 12), st.integers(1, 28), st.integers(0, 23), st.integers(0, 59),
    st.integers(0, 59), st.sampled_from(["", "Z", "+02:00", ".123Z"]))
dates = st.builds(lambda y, mo, d: f"{y:04d}-{mo:02d}-{d:02d}", st.integers(1990, 2099), st.integers(1, 12),
                  st.integers(1, 28))
volatile = st.one_of(timestamps, dates, st.uuids().map(str), hexs.map(lambda h: f"req_{h}"),
                     hexs.map(lambda h: f"trace-{h}"))
pieces = st.lists(st.one_of(words.map(lambda w: ("s", w)), volatile.map(lambda v: ("v", v))), min_size=1, max_size=30)


def _system_text(parts: list[tuple[str, str]], seps: list[str]) -> str:
    return "".join(p + seps[i % len(seps)] for i, (_, p) in enumerate(parts))


def _moved_values(body: dict) -> list[str]:
    out = []
    for m in body["messages"]:
        content = m.get("content")
        texts = [content] if isinstance(content, str) else [p.get("text", "") for p in content or []]
        for text in texts:
            if NOTE_HEADER in text:
                note = text[text.index(NOTE_HEADER):]
                out += [line.split(" = ", 1)[1] for line in note.splitlines()[1:]]
    return out


def _no_ws(text: str) -> str:
    return re.sub(r"\s+", "", text)


@SETTINGS
@given(parts=pieces, seps=st.lists(spaces, min_size=1, max_size=4), user=words)
def test_facts_preserved(parts, seps, user):
    system = _system_text(parts, seps)
    body = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]}
    result = rewrite(body)
    out_system = result.body["messages"][0]["content"]
    # every volatile value is carried by the note, as a multiset
    assert Counter(_moved_values(result.body)) == Counter(p for k, p in parts if k == "v")
    # every other character survives, modulo whitespace
    without_placeholders = re.sub(r"\[(timestamp|date|uuid|request-id|pattern)-\d+\]", "", out_system)
    assert _no_ws(without_placeholders) == _no_ws("".join(p for k, p in parts if k == "s"))
    # the user's own text is still first in its message
    assert result.body["messages"][1]["content"].startswith(user)
    assert body["messages"][0]["content"] == system  # input not mutated


@SETTINGS
@given(parts=pieces, seps=st.lists(spaces, min_size=1, max_size=4), n_tools=st.integers(0, 5),
       list_content=st.booleans())
def test_idempotent(parts, seps, n_tools, list_content):
    system = _system_text(parts, seps)
    user = [{"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {"url": "data:x"}}] if list_content \
        else "hi"
    tools = [{"type": "function", "function": {"name": f"t{i}", "parameters": {"b": 1, "a": 2}}}
             for i in reversed(range(n_tools))]
    body = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            **({"tools": tools} if tools else {})}
    once = rewrite(body)
    twice = rewrite(once.body)
    assert twice.body == once.body
    assert twice.prefix_hash == once.prefix_hash
    assert not twice.moved


@SETTINGS
@given(prefix=st.lists(words, min_size=1, max_size=10), a=volatile, b=volatile)
def test_prefix_hash_ignores_volatile_values(prefix, a, b):
    def body(value: str) -> dict:
        return {"messages": [{"role": "system", "content": " ".join(prefix) + f" now: {value} ok"},
                             {"role": "user", "content": "q"}]}

    ra, rb = rewrite(body(a)), rewrite(body(b))
    same_kind = re.sub(r"\d", "0", a)[:4] == re.sub(r"\d", "0", b)[:4] and len(a) == len(b)
    if same_kind:
        assert ra.prefix_hash == rb.prefix_hash


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20)
messages = st.lists(st.one_of(
    json_values,
    st.fixed_dictionaries({"role": st.sampled_from(["system", "developer", "user", "assistant", "tool"]),
                           "content": json_values})), max_size=5)


@SETTINGS
@given(msgs=messages, tools=json_values, fmt=json_values, patterns=st.lists(st.sampled_from([r"v\d+", r"id=(?P<value>\w+)"]), max_size=2))
def test_never_raises(msgs, tools, fmt, patterns):
    body = {"messages": msgs, "tools": tools, "response_format": fmt}
    result = rewrite(body, RewriteOptions(volatile_patterns=tuple(patterns)))
    assert isinstance(result.prefix_hash, str) and len(result.prefix_hash) == 16
    again = rewrite(result.body, RewriteOptions(volatile_patterns=tuple(patterns)))
    assert again.body == result.body


# --- retrieved documents (router/rewrite/documents.py) ---

doc_texts = st.lists(st.one_of(words, volatile), min_size=1, max_size=6).map(" ".join)
documents = st.builds(lambda attrs, body: f"<document{attrs}>{body}</document>",
                      st.sampled_from(["", ' id="x1"', " source=kb"]), doc_texts)
DOC_SECTION = re.compile(re.escape(SECTION_HEADER) + r"\n(.*?)\n" + re.escape(SECTION_END), re.S)


def _texts(message: dict) -> list[str]:
    content = message.get("content")
    return [content] if isinstance(content, str) else [p["text"] for p in content if p.get("type") == "text"]


def _restore(text: str, labelled: dict[str, str]) -> str:
    """The text the client sent: sections removed, each placeholder replaced by its document."""
    text = re.sub(r"^" + DOC_SECTION.pattern + r"\n\n|\n\n" + DOC_SECTION.pattern + r"$|" + DOC_SECTION.pattern, "",
                  text, flags=re.S)
    return re.sub(r"\[document-\d+\]", lambda m: labelled[m.group()], text)


def _sections(body: dict) -> dict[str, str]:
    labelled = {}
    for m in body["messages"]:
        for text in _texts(m):
            for section in DOC_SECTION.findall(text):
                lines = section.split("\n")
                for label, doc in zip(lines[::2], lines[1::2]):
                    assert label not in labelled
                    labelled[label] = doc
    return labelled


def _rag_body(system_words, turns, docs, order_key, list_parts):
    """A conversation whose system prompt and user turns carry ``docs`` at positions drawn by
    ``order_key``."""
    slots = [[] for _ in range(len(turns) + 1)]
    for i, doc in enumerate(docs):
        slots[order_key[i % len(order_key)] % len(slots)].append(doc)
    messages = [{"role": "system", "content": " ".join(system_words) + "".join(slots[0])}]
    for i, (user, answer) in enumerate(turns):
        text = user + "\n" + "\n".join(slots[i + 1])
        messages.append({"role": "user", "content": [{"type": "text", "text": text}] if list_parts else text})
        messages.append({"role": "assistant", "content": answer})
    return {"messages": messages}


@SETTINGS
@given(system=st.lists(words, min_size=1, max_size=5), turns=st.lists(st.tuples(words, words), min_size=1, max_size=4),
       docs=st.lists(documents, max_size=6), order_key=st.lists(st.integers(0, 9), min_size=1, max_size=6),
       list_parts=st.booleans(), as_sent=st.booleans())
def test_documents_preserved_and_idempotent(system, turns, docs, order_key, list_parts, as_sent):
    body = _rag_body(system, turns, docs, order_key, list_parts)
    opts = RewriteOptions(documents=DocumentOptions(order="as_sent" if as_sent else "sorted"))
    once = rewrite(body, opts)
    labelled = _sections(once.body)
    # the multiset of documents is carried by the sections, each exactly once
    assert Counter(labelled.values()) == Counter(docs)
    assert sum(once.documents.values()) == len(docs)
    # every placeholder names one document, and restoring gives the client's text back
    for before, after in zip(body["messages"], once.body["messages"]):
        kept = [t for t in _texts(after) if not t.startswith(NOTE_HEADER) and DOC_SECTION.fullmatch(t) is None]
        assert len(kept) == len(_texts(before))  # new parts are sections (or the note) only
        for old, new in zip(_texts(before), kept):
            restored = _restore(new, labelled)
            if before["role"] == "system":
                assert _no_ws(restored) == _no_ws(old)
            else:
                assert restored == old
    twice = rewrite(once.body, opts)
    assert twice.body == once.body and twice.prefix_hash == once.prefix_hash and not twice.notes


@SETTINGS
@given(system=st.lists(words, min_size=1, max_size=5), turns=st.lists(st.tuples(words, words), min_size=1, max_size=4),
       docs=st.lists(documents, min_size=1, max_size=6, unique=True),
       keys=st.tuples(st.lists(st.integers(1, 9), min_size=1, max_size=6), st.lists(st.integers(1, 9), min_size=1,
                                                                                   max_size=6)),
       seed=st.randoms())
def test_documents_in_any_turn_and_order_share_the_prefix_hash(system, turns, docs, keys, seed):
    shuffled = list(docs)
    seed.shuffle(shuffled)
    # user turns only (key 0 would put a document in the system prompt, a different prefix)
    a = rewrite(_rag_body(system, turns, docs, [k % len(turns) + 1 for k in keys[0]], False))
    b = rewrite(_rag_body(system, turns, shuffled, [k % len(turns) + 1 for k in keys[1]], True))
    assert a.prefix_hash == b.prefix_hash
    assert _sections(a.body) == _sections(b.body)


def _spans_by_scanning_every_taken_span(text, detectors):
    """find_spans as first written (each match checked against every span taken so far):
    the reference the linear walk must agree with."""
    from router.rewrite.volatile import PLACEHOLDER, Span, _matches

    taken = [m.span() for m in PLACEHOLDER.finditer(text)]
    found = []
    for kind, regex in detectors:
        for m in _matches(kind, regex, text):
            start, end = m.span("value") if "value" in regex.groupindex and m.group("value") else m.span()
            if start >= end or any(start < e and s < end for s, e in taken):
                continue
            taken.append((start, end))
            found.append(Span(kind, start, end, text[start:end]))
    return sorted(found, key=lambda s: s.start)


# Overlapping detectors: a date inside a timestamp, a hex run inside a UUID, a policy pattern
# whose value group is part of its match, and placeholders already in the text.
span_texts = st.lists(st.one_of(words, volatile, st.sampled_from(["[timestamp-1]", "[pattern-2]", "build 7",
                                                                 "abc", "build "])), min_size=1, max_size=40)


@SETTINGS
@given(parts=span_texts, seps=st.lists(spaces, min_size=1, max_size=3))
def test_find_spans_agrees_with_checking_every_taken_span(parts, seps):
    from router.rewrite.core import _detectors
    from router.rewrite.volatile import find_spans

    text = _system_text([("", p) for p in parts], seps)
    detectors = _detectors((r"build (?P<value>\d+)", r"[a-f0-9]{3,}", r"\d{4}"))
    assert find_spans(text, detectors) == _spans_by_scanning_every_taken_span(text, detectors)
