"""Which door's dialect a body is written in, for ``POST /v1/route``, which takes a body of
any of them and answers with the decision its own door would make.

The client may say it (``?dialect=chat|completions|responses|messages``); otherwise the
body tells: ``prompt`` is a legacy completion, ``input`` a Responses request, ``messages``
a Chat Completions request unless something only Anthropic's Messages API has is there (an
``anthropic-version`` header, top-level ``system``, ``stop_sequences``, ``thinking``, a tool
with ``input_schema``, a content block of an Anthropic-only type). A body valid in both
chat and Messages (one plain user message, ``max_tokens``) routes alike through either.
"""

from __future__ import annotations

from gateway.doors.base import Door
from gateway.doors.chat import CHAT, COMPLETIONS
from gateway.doors.messages import MESSAGES
from gateway.doors.responses import RESPONSES
from router.errors import InvalidRequest

DOORS: dict[str, Door] = {"chat": CHAT, "completions": COMPLETIONS, "responses": RESPONSES, "messages": MESSAGES}

ANTHROPIC_FIELDS = frozenset({"system", "stop_sequences", "thinking"})
ANTHROPIC_BLOCKS = frozenset({"tool_use", "tool_result", "image", "document", "thinking", "redacted_thinking"})


def door_for(raw: dict, headers, asked: str | None = None) -> Door:
    """The door whose dialect ``raw`` is written in (``asked`` wins when given).

    Raises:
        InvalidRequest: ``asked`` is not a dialect; or the body has both ``prompt`` and
            ``messages`` (each endpoint would route on another field).
    """
    if asked is not None:
        door = DOORS.get(asked)
        if door is None:
            raise InvalidRequest(f"dialect: must be one of {', '.join(DOORS)}, not {asked[:40]!r}", param="dialect")
        return door
    if "prompt" in raw and "messages" in raw:
        raise InvalidRequest("The body has both 'prompt' (legacy completions) and 'messages' (chat); send the "
                             "one of the endpoint you mean to call", param="prompt", code="ambiguous_body")
    if "prompt" in raw:
        return COMPLETIONS
    if "input" in raw and "messages" not in raw:
        return RESPONSES
    return MESSAGES if _anthropic(raw, headers) else CHAT


def _anthropic(raw: dict, headers) -> bool:
    if headers.get("anthropic-version") or ANTHROPIC_FIELDS & raw.keys():
        return True
    tools = raw.get("tools")
    if isinstance(tools, list) and any(isinstance(t, dict) and "input_schema" in t for t in tools):
        return True
    messages = raw.get("messages")
    for m in messages if isinstance(messages, list) else ():
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, list) and any(isinstance(b, dict) and b.get("type") in ANTHROPIC_BLOCKS
                                             for b in content):
            return True
    return False
