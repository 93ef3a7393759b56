"""Volatile spans: values that change on every request and so break an exact prefix match.

Built-in detectors (applied in this order; an earlier detector's span wins an overlap):

================  ==========================================================================
kind              what it matches
================  ==========================================================================
``timestamp``     ISO 8601 date-times (``2025-06-01T10:04:05Z``, ``2025-06-01 10:04``, with
                  optional fraction and offset), RFC 7231 HTTP dates
                  (``Sun, 06 Nov 1994 08:49:37 GMT``), times of day with seconds
                  (``14:03:22``)
``date``          ISO dates (``2025-06-01``, ``2025/06/01``) and English long dates
                  (``June 1, 2025``, ``1 June 2025``)
``uuid``          RFC 4122 textual UUIDs (8-4-4-4-12 hex digits)
``request-id``    prefixed ids (``req_8f3a…``, ``trace-…``, ``chatcmpl-…``) with at least 6
                  id characters, the value after ``request id:`` / ``trace_id=`` labels, and
                  runs of 20+ lower-case hex digits (hashes, Mongo/OTel ids)
``pattern``       policy-configured regexes (``rewrite.volatile_patterns``); when a pattern
                  has a named group ``value`` only that group moves. They run with the
                  ``regex`` module (``re`` syntax) and a :data:`PATTERN_TIMEOUT_S` budget per
                  text: a pattern that takes longer moves nothing in that text (logged)
================  ==========================================================================

A moved span is replaced in place by a placeholder ``[kind-N]`` (N counts per kind from 1
in order of appearance), so the stable text keeps its shape and the note that carries the
values can say what each one was. Placeholders never match a built-in detector, which
keeps the rewrite idempotent; a policy regex that matches a placeholder is the operator's
bug (the rewrite stays correct, it just moves the placeholder again).
"""

from __future__ import annotations

import heapq
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

_MONTHS = r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)"  # noqa: E501

BUILTIN: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("timestamp", re.compile(
        r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d{1,9})?)?(?:Z|[+-]\d{2}:?\d{2})?(?![\w:])")),
    ("timestamp", re.compile(
        r"\b(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d{2} " + _MONTHS + r" \d{4} \d{2}:\d{2}:\d{2} (?:GMT|UTC|[+-]\d{4})\b")),
    ("timestamp", re.compile(r"(?<![\w:.])\d{1,2}:\d{2}:\d{2}(?:\.\d{1,9})?(?![\w:])")),
    ("date", re.compile(r"\b\d{4}[-/]\d{2}[-/]\d{2}\b")),
    ("date", re.compile(r"\b" + _MONTHS + r"\.? \d{1,2}(?:st|nd|rd|th)?, \d{4}\b")),
    ("date", re.compile(r"\b\d{1,2} " + _MONTHS + r" \d{4}\b")),
    ("uuid", re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")),
    ("request-id", re.compile(
        r"\b(?:req|request|trace|span|run|sess|session|msg|call|chatcmpl|cmpl|corr|correlation|txn)"
        r"[-_](?=[A-Za-z0-9_-]*\d)[A-Za-z0-9_-]{6,}\b")),
    ("request-id", re.compile(
        r"(?i)\b(?:request|trace|correlation|session|run)[ _-]?id\b\s*[:=#]\s*(?P<value>[A-Za-z0-9][A-Za-z0-9_.:-]{3,})")),
    ("request-id", re.compile(r"\b[0-9a-f]{20,}\b")),
)
"""``(kind, regex)`` pairs, in priority order (see the module docstring)."""

PLACEHOLDER = re.compile(r"\[(?:timestamp|date|uuid|request-id|pattern|document)-\d+\]")
"""What a placeholder looks like (``[kind-N]``; ``[document-N]`` marks a moved document,
:mod:`router.rewrite.documents`)."""


@dataclass(frozen=True)
class Span:
    """A volatile value found in a text: ``text[start:end] == value``."""

    kind: str
    start: int
    end: int
    value: str


PATTERN_TIMEOUT_S = 0.01
"""Longest a policy pattern may search one text (seconds): the rewrite runs on the event loop,
so an operator's pattern with catastrophic backtracking on some client's text must not stall
every request (``regex`` avoids most of it, e.g. ``(a+)+$``, where ``re`` takes seconds on 30
characters; the timeout is the backstop)."""

log = logging.getLogger("mixroute.rewrite")


def compile_patterns(patterns: Sequence[str]) -> list[tuple[str, Any]]:
    """Compile policy regexes (``re`` syntax, run by the ``regex`` module) into detectors of
    kind ``pattern``.

    Raises:
        regex.error: an invalid regex (the policy model validates them first).
    """
    import regex

    return [("pattern", regex.compile(p)) for p in patterns]


def _matches(kind: str, pattern: Any, text: str) -> list[Any]:
    if kind != "pattern":
        return list(pattern.finditer(text))
    try:
        return list(pattern.finditer(text, timeout=PATTERN_TIMEOUT_S))
    except TimeoutError:
        log.warning("rewrite: volatile pattern %r took over %.0f ms on a %d-character text; nothing moved for it",
                    pattern.pattern[:100], PATTERN_TIMEOUT_S * 1000, len(text))
        return []


def find_spans(text: str, detectors: Sequence[tuple[str, Any]]) -> list[Span]:
    """Non-overlapping, non-empty volatile spans of ``text``, sorted by position.

    Earlier detectors win overlaps; placeholders (:data:`PLACEHOLDER`) are never matched; a
    policy pattern over its :data:`PATTERN_TIMEOUT_S` contributes nothing.
    """
    # Spans taken so far, sorted and disjoint. One detector's matches come left to right
    # without overlapping each other, so one forward walk over the taken spans checks them
    # all: linear per detector (a scan of every taken span per match took minutes on a
    # system prompt of a few hundred thousand timestamps, with the event loop blocked).
    taken: list[tuple[int, int]] = [m.span() for m in PLACEHOLDER.finditer(text)]
    found: list[Span] = []
    for kind, regex in detectors:
        new: list[tuple[int, int]] = []
        j = 0
        for m in _matches(kind, regex, text):
            start, end = m.span("value") if "value" in regex.groupindex and m.group("value") else m.span()
            if start >= end:
                continue
            while j < len(taken) and taken[j][1] <= start:
                j += 1
            if j < len(taken) and taken[j][0] < end:  # the first taken span ending after start overlaps
                continue
            new.append((start, end))
            found.append(Span(kind, start, end, text[start:end]))
        taken = list(heapq.merge(taken, new))
    return sorted(found, key=lambda s: s.start)


def replace_spans(text: str, spans: Sequence[Span], counters: dict[str, int]) -> tuple[str, list[tuple[str, str]]]:
    """Replace each span by its placeholder.

    Args:
        counters: per-kind counts so far (updated), so placeholders are unique per request.

    Returns:
        The new text and ``[(placeholder, value)]`` in order of appearance.
    """
    out, moved, pos = [], [], 0
    for span in spans:
        counters[span.kind] = counters.get(span.kind, 0) + 1
        name = f"[{span.kind}-{counters[span.kind]}]"
        out += [text[pos:span.start], name]
        moved.append((name, span.value))
        pos = span.end
    out.append(text[pos:])
    return "".join(out), moved
