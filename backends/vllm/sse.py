"""Server-sent events as OpenAI-compatible servers stream them.

Follows the WHATWG SSE event-stream format: an event is the ``data:`` lines up to a blank
line, joined with ``\\n``; lines starting with ``:`` are comments; other fields (``event:``,
``id:``, ``retry:``) are ignored. OpenAI and vLLM send one JSON object per event and end
with ``data: [DONE]``.

Lines end only at CR, LF or CRLF (the spec). ``httpx.Response.aiter_lines`` is not used: it
splits like ``str.splitlines`` (also at U+0085, U+2028, U+2029, ...), which JSON strings may
contain unescaped, so model text with such a character would cut an event in half (the bug
fixed in httpx-sse 0.4.2, florimondmanca/httpx-sse#34). :func:`sse_lines` re-assembles lines
split across network chunks from ``aiter_text()``, whose incremental decoder already
handles UTF-8 sequences split across chunks.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterable, AsyncIterator

import orjson

DONE = "[DONE]"
_EOL = re.compile(r"\r\n|\r|\n")


class SSEDecodeError(ValueError):
    """An event's data is neither JSON nor ``[DONE]``."""


MAX_LINE_CHARS = 8 << 20
"""Longest SSE line accepted from an upstream (characters, 8 Mi): a longer one is an
upstream fault (:class:`SSEDecodeError`), not something to buffer without bound."""
MAX_EVENT_CHARS = 16 << 20
"""Longest event data (its ``data:`` lines together) accepted from an upstream (characters)."""


def _line_too_long(max_line: int) -> SSEDecodeError:
    return SSEDecodeError(f"an SSE line is longer than {max_line} characters")


async def sse_lines(texts: AsyncIterable[str], max_line: int = MAX_LINE_CHARS) -> AsyncIterator[str]:
    """Yield the lines (without their end) of a text stream split at CR, LF or CRLF only.

    Time is linear in the stream's length however its chunks cut the lines (each chunk is
    split once; an unfinished line is kept as a list of pieces).

    Raises:
        SSEDecodeError: a line longer than ``max_line`` characters.
    """
    pending: list[str] = []  # pieces of the line not ended yet
    size, held_cr = 0, False  # held_cr: a CR ended the last chunk; it may be the first half of a CRLF
    async for text in texts:
        if held_cr:
            text, held_cr = "\r" + text, False
        if text.endswith("\r"):
            text, held_cr = text[:-1], True
        parts = _EOL.split(text)
        if len(parts) > 1:
            if size + len(parts[0]) > max_line:
                raise _line_too_long(max_line)
            yield "".join(pending) + parts[0] if pending else parts[0]
            pending, size = [], 0
            for line in parts[1:-1]:
                if len(line) > max_line:
                    raise _line_too_long(max_line)
                yield line
        if parts[-1]:
            pending.append(parts[-1])
            size += len(parts[-1])
            if size > max_line:
                raise _line_too_long(max_line)
    rest = "".join(pending)
    if rest or held_cr:
        yield rest


async def iter_sse_data(lines: AsyncIterable[str], max_event: int = MAX_EVENT_CHARS) -> AsyncIterator[str]:
    """Yield each event's data string (``[DONE]`` included) from an SSE line stream.

    Raises:
        SSEDecodeError: an event's data is longer than ``max_event`` characters.
    """
    buf: list[str] = []
    size = 0
    async for line in lines:
        if not line:
            if buf:
                yield "\n".join(buf)
                buf, size = [], 0
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        if field == "data":
            buf.append(value[1:] if value.startswith(" ") else value)
            size += len(buf[-1]) + 1
            if size > max_event:
                raise SSEDecodeError(f"an SSE event is longer than {max_event} characters")
    if buf:
        yield "\n".join(buf)


def decode_events(data: str) -> tuple[list[dict], bool]:
    """Decode one event's data into JSON objects.

    Servers that omit the blank line between events produce multi-line data; each line is
    then tried as its own JSON object.

    Returns:
        ``(objects, done)``: the decoded objects in order, and whether ``[DONE]`` was seen
        (anything after it is ignored).

    Raises:
        SSEDecodeError: the data is not a JSON object.
    """
    if data.strip() == DONE:
        return [], True
    try:
        return [_object(orjson.loads(data), data)], False
    except orjson.JSONDecodeError:
        pass
    out: list[dict] = []
    for part in data.split("\n"):
        if part.strip() == DONE:
            return out, True
        try:
            out.append(_object(orjson.loads(part), part))
        except orjson.JSONDecodeError as exc:
            raise SSEDecodeError(f"invalid SSE data: {part[:80]!r}") from exc
    return out, False


def _object(value: object, raw: str) -> dict:
    if not isinstance(value, dict):
        raise SSEDecodeError(f"SSE data is not a JSON object: {raw[:80]!r}")
    return value
