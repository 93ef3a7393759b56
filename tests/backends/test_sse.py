"""SSE parsing survives any re-chunking of the byte stream (Hypothesis), through the same
``httpx.Response.aiter_text`` -> :func:`sse_lines` path the vLLM backend uses."""

from __future__ import annotations

import asyncio

import httpx
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backends.vllm.sse import SSEDecodeError, decode_events, iter_sse_data, sse_lines

_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
chunks_st = st.lists(st.dictionaries(st.text(min_size=1, max_size=6), _json, min_size=1, max_size=4), max_size=6)


async def _parse(pieces: list[bytes]) -> tuple[list[dict], bool]:
    async def body():
        for p in pieces:
            yield p

    response = httpx.Response(200, content=body())
    out, done = [], False
    async for data in iter_sse_data(sse_lines(response.aiter_text())):
        objs, done = decode_events(data)
        out.extend(objs)
        if done:
            break
    return out, done


def _split(raw: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(raw) + 1) for c in cuts})
    bounds = [0, *points, len(raw)]
    return [raw[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]


@settings(max_examples=80, deadline=None)
@given(chunks=chunks_st, cuts=st.lists(st.integers(min_value=0), max_size=12),
       newline=st.sampled_from(["\n", "\r\n", "\r"]), comments=st.booleans())
def test_rechunked_stream_parses_to_same_objects(chunks, cuts, newline, comments):
    parts = []
    for c in chunks:
        if comments:
            parts.append(f": keep-alive{newline}{newline}")
        parts.append(f"data: {orjson.dumps(c).decode()}{newline}{newline}")
    parts.append(f"data: [DONE]{newline}{newline}")
    raw = "".join(parts).encode()
    out, done = asyncio.run(_parse(_split(raw, cuts)))
    assert out == chunks and done


async def test_unicode_line_separators_stay_inside_data():
    chunk = {"content": "a\u2028b\u2029c\x85d\x0be"}
    raw = b"data: " + orjson.dumps(chunk) + b"\n\ndata: [DONE]\n\n"
    assert await _parse([raw[:9], raw[9:10], raw[10:]]) == ([chunk], True)


async def test_missing_blank_lines_and_trailing_event():
    raw = b'event: message\ndata: {"a": 1}\ndata: {"b": 2}\n\ndata: {"c": 3}'
    assert await _parse([raw]) == ([{"a": 1}, {"b": 2}, {"c": 3}], False)


async def test_done_inside_multiline_data_stops():
    assert decode_events('{"a": 1}\n[DONE]\n{"b": 2}') == ([{"a": 1}], True)


@pytest.mark.parametrize("data", ["not json", "[1, 2]", '{"a": 1}\nnope'])
def test_invalid_data_raises(data):
    with pytest.raises(SSEDecodeError):
        decode_events(data)


async def _lines(pieces: list[str], **kw) -> list[str]:
    async def gen():
        for p in pieces:
            yield p

    return [line async for line in sse_lines(gen(), **kw)]


@settings(max_examples=200, deadline=None)
@given(text=st.text(alphabet="ab\r\n\u2028", max_size=40), cuts=st.lists(st.integers(min_value=0), max_size=10))
def test_lines_do_not_depend_on_chunking(text, cuts):
    """Whatever the chunks, the lines are those of the whole text split at CR, LF or CRLF
    (a trailing line end ends the last line; U+2028 is not a line end)."""
    import re

    want = re.split(r"\r\n|\r|\n", text)
    if want and want[-1] == "":
        want.pop()
    bounds = sorted({c % (len(text) + 1) for c in cuts})
    pieces = [text[a:b] for a, b in zip([0, *bounds], [*bounds, len(text)]) if b > a]
    assert asyncio.run(_lines(pieces)) == want


def test_overlong_lines_and_events_are_refused():
    """An upstream cannot make the gateway buffer without bound: a line or an event over
    the cap is an error, however it is chunked."""
    with pytest.raises(SSEDecodeError, match="line is longer than 10"):
        asyncio.run(_lines(["data: ", "x" * 3] * 3, max_line=10))
    with pytest.raises(SSEDecodeError, match="line is longer than 10"):
        asyncio.run(_lines(["ok\n" + "y" * 11 + "\nz"], max_line=10))
    assert asyncio.run(_lines(["a" * 10, "\n", "b" * 10], max_line=10)) == ["a" * 10, "b" * 10]

    async def events(lines):
        async def gen():
            for line in lines:
                yield line
        return [e async for e in iter_sse_data(gen(), max_event=20)]

    with pytest.raises(SSEDecodeError, match="event is longer than 20"):
        asyncio.run(events(["data: 0123456789"] * 3))
    assert asyncio.run(events(["data: 0123456789", "", "data: 0123456789", ""])) == ["0123456789"] * 2
