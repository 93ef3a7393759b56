"""Hypothesis invariants of the rewriter: no fact is lost, rewriting is idempotent, the
prefix hash ignores volatile values, and nothing raises."""

from __future__ import annotations

import re
from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from router.rewrite import NOTE_HEADER, RewriteOptions, rewrite

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
