"""The ``fake`` backend: deterministic answers, behaviour chosen by the model name.

Model-name suffixes (TensorZero's dummy-provider idea):

- ``...-slow``: ``options.first_token_delay_s`` (default 0.5 s) before the first token and
  ``options.token_delay_s`` (default 0.02 s) between chunks.
- ``...-error-429`` / ``...-error-500``: fail before the first byte, as the upstream would.
- ``...-drop-mid-stream``: a stream breaks after 3 chunks; a non-streaming call fails.
- anything else: normal.

The answer text is ``[<model>] `` followed by a deterministic reply derived from the last
user message. When the request offers ``tools`` (and ``tool_choice`` is not ``none``), the
fake calls the forced tool, or the first one, with arguments built from its JSON schema.
"""

from __future__ import annotations

import hashlib

import orjson

from backends.base import Endpoint
from backends.errors import BackendRateLimited, BackendServerError
from backends.openai_shapes import prompt_text
from backends.synthetic import Answer, SyntheticBackend

_SAMPLE = {"string": "example", "integer": 1, "number": 1.0, "boolean": True, "array": [], "object": {}}


class FakeBackend(SyntheticBackend):
    """See module docstring."""

    async def answer(self, endpoint: Endpoint, body: dict) -> Answer:
        model = self.model
        if model.endswith("-error-429"):
            raise BackendRateLimited(f"{self.name}: rate limited (fake)", backend=self.name, upstream_status=429)
        if model.endswith("-error-500"):
            raise BackendServerError(f"{self.name}: internal error (fake)", backend=self.name, upstream_status=500)
        text = prompt_text(endpoint, body)
        digest = hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:8]
        last = _last_user_text(body) if endpoint == "chat" else text
        reply = f"[{model}] This is a demo answer ({digest}) to: {' '.join(last.split()[:24])}"
        answer = Answer(text=reply)
        tool_calls = _tool_calls(body, digest) if endpoint == "chat" else []
        if tool_calls:
            answer = Answer(text="", tool_calls=tool_calls)
        if model.endswith("-slow"):
            answer.first_token_delay_s = float(self.config.options.get("first_token_delay_s", 0.5))
            answer.token_delay_s = float(self.config.options.get("token_delay_s", 0.02))
        if model.endswith("-drop-mid-stream"):
            answer.fail_after_chunks = 3
        return answer


def _last_user_text(body: dict) -> str:
    for m in reversed(body.get("messages", [])):
        if m.get("role") == "user":
            c = m.get("content")
            if isinstance(c, str):
                return c
            if isinstance(c, list):
                return " ".join(p.get("text", "") for p in c if isinstance(p, dict))
    return ""


def _tool_calls(body: dict, digest: str) -> list[dict]:
    tools = [t for t in body.get("tools") or [] if isinstance(t, dict) and t.get("type") == "function"]
    choice = body.get("tool_choice")
    if not tools or choice == "none":
        return []
    tool = tools[0]
    if isinstance(choice, dict):
        wanted = (choice.get("function") or {}).get("name")
        tool = next((t for t in tools if t["function"].get("name") == wanted), tool)
    fn = tool.get("function", {})
    params = fn.get("parameters") or {}
    args = {
        k: _SAMPLE.get((params.get("properties", {}).get(k) or {}).get("type", "string"), "example")
        for k in params.get("required", [])
    }
    return [{"id": f"call_{digest}", "type": "function",
             "function": {"name": fn.get("name", "tool"), "arguments": orjson.dumps(args).decode()}}]
