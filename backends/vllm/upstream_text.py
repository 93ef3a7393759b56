"""Upstream error text as clients may see it (message, ``param``, ``code``), and an
upstream's ``Retry-After``.

Upstream messages reach clients inside the OpenAI error envelope; internal topology (URLs,
addresses, host names, a proxy's HTML error page) must not. Used by
:mod:`backends.vllm.backend` for status errors and stream error events, and by
:mod:`backends.hosted.backend`.
"""

from __future__ import annotations

import ipaddress
import math
import re
import time
from collections.abc import Callable
from email.utils import parsedate_to_datetime
from http import HTTPStatus

import orjson

_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>]+")
_IPV4 = re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b")
_IPV6 = re.compile(r"\[?[0-9a-fA-F]*:[0-9a-fA-F:.]*:[0-9a-fA-F.]*(?:%\w+)?\]?(?::\d+)?")
_HOST = re.compile(r"\b[a-zA-Z0-9][a-zA-Z0-9-]*(?:\.[a-zA-Z0-9-]+)*\.[a-zA-Z][a-zA-Z0-9-]+(?::\d+)?\b")


def scrub(text: str) -> str:
    """``text`` with URLs, IPv4/IPv6 addresses and dotted host names (``vllm-0.ns.svc``,
    ``gpu-3.internal``) replaced by ``<url>``, ``<address>`` and ``<host>``: upstream
    messages reach clients, internal topology must not."""
    text = _URL.sub("<url>", text)
    text = _IPV6.sub(_ipv6, text)
    text = _IPV4.sub("<address>", text)
    return _HOST.sub(_host, text)


#: Last labels that name files, not hosts (``config.json``, ``model.safetensors``).
_FILE_SUFFIXES = frozenset({"json", "jsonl", "yaml", "yml", "py", "txt", "csv", "md", "bin", "pt", "pth", "gguf",
                            "safetensors", "onnx", "model", "log", "cfg", "ini", "toml", "html", "jinja"})


def _host(match: re.Match) -> str:
    name = match.group(0).split(":")[0]
    return match.group(0) if name.rsplit(".", 1)[-1].lower() in _FILE_SUFFIXES else "<host>"


def _ipv6(match: re.Match) -> str:
    token = match.group(0)
    core = token[1:token.index("]")] if token.startswith("[") and "]" in token else token
    if not any(ch.isalnum() for ch in core):
        return token
    try:
        ipaddress.IPv6Address(core.split("%")[0])
    except ValueError:
        return token  # a time of day, a ratio: not an address
    return "<address>"


def _phrase(status: int) -> str:
    """The standard reason phrase of ``status`` (an upstream's own phrase may name hosts)."""
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "error"


def upstream_message(data: bytes, status: int, redact: Callable[[str], str] | None = None) -> str:
    """The error message of an upstream error response body, safe to show a client: the
    OpenAI envelope's ``error.message`` (or vLLM's older top-level ``message``) passed
    through ``redact`` (the backend's credentials, before anything cuts them in half) and
    :func:`scrub`, at most 300 characters; for any other body (HTML error pages
    of proxies, plain text) only its size, since those name hosts and addresses; the
    standard reason phrase of ``status`` when the body is empty."""
    try:
        parsed = orjson.loads(data)
    except orjson.JSONDecodeError:
        parsed = None
    message = None
    if isinstance(parsed, dict):
        err = parsed.get("error")
        if isinstance(err, dict) and err.get("message"):
            message = str(err["message"])
        elif isinstance(err, str):
            message = err
        elif parsed.get("message"):
            message = str(parsed["message"])
    if message is None:
        if not data.strip():
            return _phrase(status)
        return f"{_phrase(status)} (a {len(data)}-byte non-JSON body, not shown)"
    if redact is not None:
        message = redact(message)
    return scrub(message)[:300].strip() or _phrase(status)


#: vLLM's wordings for a prompt beyond the model's context window (it sends ``code`` 400, an
#: integer, not OpenAI's ``context_length_exceeded``): "This model's maximum context length
#: is 8192 tokens. However, you requested ..." and "The decoder prompt (length 9000) is
#: longer than the maximum model length of 8192".
CONTEXT_WORDING = re.compile(r"maximum context length|longer than the maximum model length", re.IGNORECASE)


def upstream_fields(error: bytes | dict) -> tuple[str | None, str | None]:
    """``(param, code)`` of an upstream error: a response body holding the OpenAI envelope
    (or vLLM's older top-level error object), or the ``error`` object itself. Each is a
    string or ``None`` (vLLM's integer ``code`` is ``None``, except that a message in
    :data:`CONTEXT_WORDING` gives ``context_length_exceeded``); ``param`` is passed through
    :func:`scrub`, at most 100 characters."""
    if isinstance(error, bytes):
        try:
            parsed = orjson.loads(error)
        except orjson.JSONDecodeError:
            return None, None
        error = parsed.get("error", parsed) if isinstance(parsed, dict) else None
    if not isinstance(error, dict):
        return None, None
    param, code = error.get("param"), error.get("code")
    message = error.get("message")
    if not isinstance(code, str) and isinstance(message, str) and CONTEXT_WORDING.search(message[:2000]):
        code = "context_length_exceeded"
    return (scrub(param)[:100] if isinstance(param, str) and param else None,
            code if isinstance(code, str) else None)


MAX_RETRY_AFTER_S = 3600
"""Longest upstream ``Retry-After`` passed on to clients (seconds)."""


def retry_after_seconds(value: str | None) -> str | None:
    """An upstream ``Retry-After`` in whole seconds (from ASCII digits or an HTTP date, at
    most :data:`MAX_RETRY_AFTER_S`), or ``None``."""
    if not value:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        return str(min(int(value), MAX_RETRY_AFTER_S))
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return str(min(MAX_RETRY_AFTER_S, max(0, math.ceil(when.timestamp() - time.time()))))
