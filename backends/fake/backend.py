"""The ``fake`` backend: deterministic answers, behaviour chosen by the model name.

Model-name suffixes (TensorZero's dummy-provider idea):

- ``...-slow``: ``options.first_token_delay_s`` (default 0.5 s) before the first token and
  ``options.token_delay_s`` (default 0.02 s) between chunks.
- ``...-error-429`` / ``...-error-500``: fail before the first byte, as the upstream would.
- ``...-error-context``: a 400 ``context_length_exceeded`` (param ``messages``, or ``prompt``
  for legacy completions), as a model
  whose context window the prompt exceeds answers.
- ``...-drop-mid-stream``: a stream breaks after 3 chunks; a non-streaming call fails.
- ``...-adapter-bug``: raises a plain ``RuntimeError`` (not a ``BackendError``), as a bug in a
  backend adapter would; the dispatcher must fall back and record the outcome.
- anything else: normal.

The answer text is ``[<model>] `` followed by a deterministic reply derived from the last
user message. Request fields it honours, as a real model would:

- ``tools`` (``tool_choice`` not ``none``): calls the forced tool, or the first one, with
  arguments built from its JSON schema -- unless the last message is a ``tool`` result,
  which it answers in text, so agent loops terminate.
- ``response_format``: ``json_object`` answers ``{"model": ..., "answer": <text>}``;
  ``json_schema`` answers an object with the schema's required properties (every property
  when ``strict``) filled by type (``enum``/``const``: the first value; nested objects and
  ``$ref`` to ``$defs`` recursively).
- ``stop`` (a string or a list): the text is cut before the first occurrence of any stop
  string (finish_reason ``stop``).
- ``max_completion_tokens`` / ``max_tokens``: the text is cut to that many estimated tokens
  (:func:`backends.openai_shapes.estimate_tokens`, 4 characters a token), finish_reason
  ``length``.

As an embedding backend (``task: embedding``) it answers each input with a deterministic
unit vector drawn from a hash of the input (:func:`fake_vector`).
"""

from __future__ import annotations

import hashlib
import math
from array import array
from functools import cached_property

import orjson

from backends.base import Endpoint
from backends.call import NO_CONTEXT, CallContext, CallReport
from backends.errors import BackendRateLimited, BackendServerError, from_status
from backends.openai_shapes import embedding_inputs, embedding_list, embedding_tokens, prompt_text
from backends.registry import FakeOptions
from backends.synthetic import Answer, SyntheticBackend

_SAMPLE = {"string": "example", "integer": 1, "number": 1.0, "boolean": True, "array": [], "object": {},
           "null": None}
_CHARS_PER_TOKEN = 4  # the inverse of backends.openai_shapes.estimate_tokens
_MAX_SCHEMA_DEPTH = 8  # a self-referencing $ref stops here
_PROMPT_PARAM = {"completions": "prompt", "embeddings": "input"}  # the field holding the prompt


class FakeBackend(SyntheticBackend):
    """See module docstring."""

    async def embed(self, body: dict, *, context: CallContext = NO_CONTEXT, report: CallReport | None = None) -> dict:
        """Deterministic unit vectors (:func:`fake_vector`), ``dimensions`` long (else
        ``options.embedding_dimensions``); usage: :func:`backends.openai_shapes.embedding_tokens`
        per input. The failure suffixes behave as for chat (``-error-context``: param ``input``)."""
        self._fail("embeddings")
        inputs = embedding_inputs(body)
        asked = body.get("dimensions")
        size = asked if isinstance(asked, int) and asked > 0 else self._options.embedding_dimensions
        vectors = [fake_vector(i if isinstance(i, str) else orjson.dumps(i).decode(), size) for i in inputs]
        return embedding_list(self.model, vectors, sum(embedding_tokens(i) for i in inputs))

    @cached_property
    def _options(self) -> FakeOptions:
        return FakeOptions.model_validate(self.config.options)

    def _fail(self, endpoint: str) -> None:
        """Raise the failure the model name's suffix asks for (see the module docstring), if any."""
        model = self.model
        if model.endswith("-error-429"):
            raise BackendRateLimited(f"{self.name}: rate limited (fake)", backend=self.name, upstream_status=429)
        if model.endswith("-error-500"):
            raise BackendServerError(f"{self.name}: internal error (fake)", backend=self.name, upstream_status=500)
        if model.endswith("-error-context"):
            raise from_status(400, f"{self.name}: this model's maximum context length is exceeded (fake)",
                              backend=self.name, param=_PROMPT_PARAM.get(endpoint, "messages"),
                              code="context_length_exceeded")
        if model.endswith("-adapter-bug"):
            raise RuntimeError(f"{self.name}: simulated adapter bug (fake)")

    async def answer(self, endpoint: Endpoint, body: dict) -> Answer:
        self._fail(endpoint)
        model = self.model
        text = prompt_text(endpoint, body)
        digest = hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:8]
        answer = _answer(endpoint, body, model, text, digest)
        if model.endswith("-slow"):
            answer.first_token_delay_s = float(self.config.options.get("first_token_delay_s", 0.5))
            answer.token_delay_s = float(self.config.options.get("token_delay_s", 0.02))
        if model.endswith("-drop-mid-stream"):
            answer.fail_after_chunks = 3
        return answer


def fake_vector(text: str, size: int) -> list[float]:
    """A unit vector of ``size`` numbers drawn from SHAKE-256 of ``text``: the same text
    always gets the same vector, different texts unrelated ones. Each number is a float32
    value, as real embedding models return, so base64 encoding (float32) loses nothing."""
    raw = array("H", hashlib.shake_256(text.encode("utf-8", "replace")).digest(2 * size))
    centred = [x - 32767.5 for x in raw]
    norm = math.sqrt(sum(x * x for x in centred)) or 1.0
    return array("f", (x / norm for x in centred)).tolist()


def _answer(endpoint: Endpoint, body: dict, model: str, text: str, digest: str) -> Answer:
    """The answer to ``body`` before the ``-slow``/``-drop`` behaviours (see module docstring)."""
    messages = (body.get("messages") or []) if endpoint == "chat" else []
    after_tool = bool(messages) and isinstance(messages[-1], dict) and messages[-1].get("role") == "tool"
    if after_tool:
        result = _content_text(messages[-1].get("content"))
        reply = f"[{model}] Based on the tool result ({digest}): {' '.join(result.split()[:24])}"
    else:
        tool_calls = _tool_calls(body, digest) if endpoint == "chat" else []
        if tool_calls:
            return Answer(text="", tool_calls=tool_calls)
        last = _last_user_text(body) if endpoint == "chat" else text
        reply = f"[{model}] This is a demo answer ({digest}) to: {' '.join(last.split()[:24])}"
    if endpoint == "chat":
        reply = _formatted(body.get("response_format"), model, reply)
    reply, finish = _limited(body, reply)
    return Answer(text=reply, finish_reason=finish)


def _formatted(response_format, model: str, reply: str) -> str:
    """``reply`` shaped by ``response_format`` (unchanged for ``text`` or none)."""
    if not isinstance(response_format, dict):
        return reply
    kind = response_format.get("type")
    if kind == "json_object":
        return orjson.dumps({"model": model, "answer": reply}).decode()
    if kind == "json_schema":
        spec = response_format.get("json_schema") or {}
        schema = spec.get("schema") or {"type": "object"}
        return orjson.dumps(_sample(schema, schema, bool(spec.get("strict")))).decode()
    return reply


def _sample(schema, root: dict, strict: bool, depth: int = 0):
    """A value valid for the JSON schema ``schema`` (the subset structured outputs use)."""
    if not isinstance(schema, dict) or depth > _MAX_SCHEMA_DEPTH:
        return None
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target = root
        for part in ref[2:].split("/"):
            target = target.get(part, {}) if isinstance(target, dict) else {}
        return _sample(target, root, strict, depth + 1)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        if schema.get(key):
            return _sample(schema[key][0], root, strict, depth + 1)
    kind = schema.get("type", "object" if {"properties", "required"} & schema.keys() else "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        props = schema.get("properties") or {}
        names = list(props) if strict else list(schema.get("required") or [])
        return {k: _sample(props.get(k, {"type": "string"}), root, strict, depth + 1) for k in names}
    if kind == "array":
        count = int(schema.get("minItems") or 0)
        return [_sample(schema.get("items") or {"type": "string"}, root, strict, depth + 1) for _ in range(count)]
    return _SAMPLE.get(kind, "example")


def _limited(body: dict, text: str) -> tuple[str, str]:
    """``text`` cut at the first ``stop`` string, then to the token limit; the finish_reason."""
    stops = body.get("stop")
    stops = [stops] if isinstance(stops, str) else [s for s in stops or [] if isinstance(s, str)]
    cuts = [i for i in (text.find(s) for s in stops if s) if i >= 0]
    if cuts:
        text = text[:min(cuts)]
    limit = body.get("max_completion_tokens") or body.get("max_tokens")
    if isinstance(limit, int) and len(text) > limit * _CHARS_PER_TOKEN:
        return text[:limit * _CHARS_PER_TOKEN], "length"
    return text, "stop"


def _content_text(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def _last_user_text(body: dict) -> str:
    for m in reversed(body.get("messages", [])):
        if m.get("role") == "user":
            return _content_text(m.get("content"))
    return ""


def _tool_calls(body: dict, digest: str) -> list[dict]:
    tools = [t for t in body.get("tools") or [] if isinstance(t, dict) and t.get("type") == "function"]
    choice = body.get("tool_choice")
    if not tools or choice == "none":
        return []
    tool = tools[0]
    if isinstance(choice, dict):
        wanted = (choice.get("function") or {}).get("name")
        tool = next((t for t in tools if isinstance(t.get("function"), dict) and t["function"].get("name") == wanted),
                    tool)
    fn = tool.get("function") if isinstance(tool.get("function"), dict) else {}
    # A schema the client got wrong (not an object, a non-object type) still gets an object
    # of arguments: the fake answers what it can, as a lenient provider would.
    schema = fn.get("parameters") if isinstance(fn.get("parameters"), dict) else {}
    params = {**schema, "type": "object"}
    if not isinstance(params.get("properties", {}), dict):
        params["properties"] = {}
    args = _sample(params, params, bool(fn.get("strict")))
    if not isinstance(args, dict):
        args = {}
    name = fn.get("name") if isinstance(fn.get("name"), str) and fn.get("name") else "tool"
    return [{"id": f"call_{digest}", "type": "function",
             "function": {"name": name, "arguments": orjson.dumps(args).decode()}}]
