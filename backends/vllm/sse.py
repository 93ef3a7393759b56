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


async def sse_lines(texts: AsyncIterable[str]) -> AsyncIterator[str]:
    """Yield the lines (without their end) of a text stream split at CR, LF or CRLF only."""
    buf = ""
    async for text in texts:
        buf += text
        hold = buf.endswith("\r")  # may be the first half of a CRLF split across chunks
        parts = _EOL.split(buf[:-1] if hold else buf)
        buf = parts.pop() + ("\r" if hold else "")
        for line in parts:
            yield line
    parts = _EOL.split(buf)
    last = parts.pop()
    for line in parts:
        yield line
    if last:
        yield last


async def iter_sse_data(lines: AsyncIterable[str]) -> AsyncIterator[str]:
    """Yield each event's data string (``[DONE]`` included) from an SSE line stream."""
    buf: list[str] = []
    async for line in lines:
        if not line:
            if buf:
                yield "\n".join(buf)
                buf = []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        if field == "data":
            buf.append(value[1:] if value.startswith(" ") else value)
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
