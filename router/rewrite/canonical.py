"""Canonical forms of the stable parts of a request: tool definitions, response schemas and
system-prompt whitespace.

- **Objects**: keys sorted, recursively (lists keep their order: ``required``, ``enum`` and
  message lists are ordered data). Exception: the members of a ``properties`` object inside
  a ``response_format`` keep the client's order, because OpenAI structured outputs emit
  fields "in the same order as the ordering of keys in the schema" (OpenAI structured
  outputs guide); sorting them would change the answer, not just its cache key.
- **Tools**: sorted by ``function.name`` (stable sort, so equal names keep their order),
  each tool canonicalised as above. A tool list that is not a list of objects with a string
  function name is left as sent, with a note.
- **Whitespace** (system/developer text): CR LF and lone CR become LF, trailing spaces and
  tabs of each line are removed, runs of three or more newlines become one blank line, and
  the text is stripped at both ends. Indentation and spaces inside a line are kept (code
  and tables in system prompts depend on them).
"""

from __future__ import annotations

import re
from typing import Any

MAX_TOOLS = 512
"""Tool lists longer than this are left as sent (a note says so): sorting them is cheap,
but a list this long is almost certainly generated and its order may be meaningful."""
MAX_DEPTH = 64
"""Objects nested deeper than this are left as sent (no recursion blow-up on hostile input)."""

_TRAILING = re.compile(r"[ \t]+(?=\n|$)")
_BLANK_RUNS = re.compile(r"\n{3,}")


class CannotCanonicalise(Exception):
    """A part of the request that is left as sent; the message is the note's text."""


def normalise_whitespace(text: str) -> str:
    """``text`` in canonical whitespace (rules in the module docstring); idempotent."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _TRAILING.sub("", text)
    return _BLANK_RUNS.sub("\n\n", text).strip()


def sort_keys(value: Any, *, keep_properties_order: bool = False, depth: int = 0) -> Any:
    """A copy of a JSON value with object keys sorted (see the module docstring).

    Raises:
        CannotCanonicalise: nesting deeper than :data:`MAX_DEPTH`.
    """
    if depth > MAX_DEPTH:
        raise CannotCanonicalise(f"nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, list):
        return [sort_keys(v, keep_properties_order=keep_properties_order, depth=depth + 1) for v in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for key in sorted(value, key=str):
        child = value[key]
        if key == "properties" and keep_properties_order and isinstance(child, dict):
            out[key] = {k: sort_keys(v, keep_properties_order=True, depth=depth + 2) for k, v in child.items()}
        else:
            out[key] = sort_keys(child, keep_properties_order=keep_properties_order, depth=depth + 1)
    return out


def canonical_tools(tools: Any) -> list:
    """Tools sorted by function name, each with sorted keys.

    Raises:
        CannotCanonicalise: not a list, longer than :data:`MAX_TOOLS`, or an entry without
            a string ``function.name`` (or a top-level ``name``, as some clients send).
    """
    if not isinstance(tools, list):
        raise CannotCanonicalise("tools is not a list")
    if len(tools) > MAX_TOOLS:
        raise CannotCanonicalise(f"{len(tools)} tools (more than {MAX_TOOLS})")
    names = [_tool_name(t) for t in tools]
    if any(n is None for n in names):
        raise CannotCanonicalise("a tool has no string function name")
    order = sorted(range(len(tools)), key=lambda i: names[i])
    return [sort_keys(tools[i]) for i in order]


def canonical_response_format(value: Any) -> Any:
    """``response_format`` with sorted keys, keeping the order of schema ``properties``.

    Raises:
        CannotCanonicalise: nesting deeper than :data:`MAX_DEPTH`.
    """
    return sort_keys(value, keep_properties_order=True)


def _tool_name(tool: Any) -> str | None:
    if not isinstance(tool, dict):
        return None
    fn = tool.get("function")
    name = fn.get("name") if isinstance(fn, dict) else tool.get("name")
    return name if isinstance(name, str) else None
