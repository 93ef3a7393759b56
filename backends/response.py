"""The typed canonical answer: what a backend's Chat Completions answer, or one chunk of its
stream, says, read once into these objects, which the Responses and Messages doors render
into their own dialects (:mod:`gateway.doors`), instead of each door picking through the
answer's dicts with its own idea of where the reasoning text or the cache reads are.

The backends answer in Chat Completions' shape (an OpenAI ``chat.completion`` and its
chunks, vLLM's and litellm's extensions included), so that is the shape read here; what a
backend knows beside its answer (its prompt-cache writes) comes in its
:class:`~backends.call.CallReport`. Reading is lenient: a backend's answer has already been
accepted, and a missing or null field reads as empty.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from backends.call import CallReport


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def reasoning_of(message_or_delta: dict) -> str:
    """The reasoning text of a chat message or delta: ``reasoning_content`` (vLLM's reasoning
    parsers, litellm) or ``reasoning`` (newer vLLM); ``""`` for none."""
    return _text(message_or_delta.get("reasoning_content")) or _text(message_or_delta.get("reasoning"))


@dataclass(frozen=True)
class Usage:
    """Token counts of one answer.

    Attributes:
        prompt_tokens: the whole prompt (tokens), cache reads and writes included, as chat's
            ``prompt_tokens`` counts it.
        cached_tokens: of them, read from the provider's prompt cache.
        cache_write_tokens: of them, written to it (the backend's report: chat's usage
            object has no field for them).
        output_tokens: the answer (tokens), reasoning included.
        reasoning_tokens: of them, reasoning.
        total_tokens: prompt and answer.
        cost_usd: the gateway's cost of the call (USD), where it was added to the usage (the
            final usage chunk of a stream); ``None`` otherwise.
    """

    prompt_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    total_tokens: int = 0
    cost_usd: float | None = None

    @classmethod
    def from_chat(cls, usage: dict | None, report: CallReport | None = None) -> "Usage":
        usage = usage or {}
        prompt, completion = _int(usage.get("prompt_tokens")), _int(usage.get("completion_tokens"))
        cost = usage.get("cost_usd")
        return cls(prompt_tokens=prompt, cached_tokens=_int((usage.get("prompt_tokens_details") or {}).get("cached_tokens")),
                   cache_write_tokens=_int(report.cache_write_tokens if report is not None else None),
                   output_tokens=completion,
                   reasoning_tokens=_int((usage.get("completion_tokens_details") or {}).get("reasoning_tokens")),
                   total_tokens=_int(usage.get("total_tokens")) or prompt + completion,
                   cost_usd=float(cost) if isinstance(cost, (int, float)) and not isinstance(cost, bool) else None)

    @property
    def uncached_tokens(self) -> int:
        """Prompt tokens neither read from nor written to the cache (Anthropic's ``input_tokens``)."""
        return max(0, self.prompt_tokens - self.cached_tokens - self.cache_write_tokens)


@dataclass(frozen=True)
class ToolCall:
    """A function call of the answer: the chat tool call's ``id``, the function's ``name`` and
    its ``arguments`` (a JSON text, as the model wrote it)."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Answer:
    """The first choice of a ``chat.completion`` (the Responses and Messages APIs answer once).

    Attributes:
        text: the answer's text (``""``: none).
        refusal: the model's refusal (OpenAI's ``refusal``), ``""`` for none.
        reasoning: its reasoning text (``""``: none).
        tool_calls: its function calls, in order.
        finish_reason: chat's ``finish_reason`` (``stop``, ``length``, ``tool_calls``...).
        stop_reason: what vLLM says ended it in the choice's ``stop_reason`` (the matched stop
            string, or a token id); ``None`` where the backend does not say.
        model: the model that answered, as the backend named it.
        usage: its token counts.
    """

    text: str = ""
    refusal: str = ""
    reasoning: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None
    stop_reason: str | int | None = None
    model: str | None = None
    usage: Usage = field(default_factory=Usage)

    @classmethod
    def from_chat(cls, response: dict, report: CallReport | None = None) -> "Answer":
        choice = (response.get("choices") or [{}])[0] or {}
        message = choice.get("message") or {}
        calls = tuple(ToolCall(id=_text(c.get("id")), name=_text((c.get("function") or {}).get("name")),
                               arguments=_text((c.get("function") or {}).get("arguments")))
                      for c in message.get("tool_calls") or () if isinstance(c, dict))
        return cls(text=_text(message.get("content")), refusal=_text(message.get("refusal")),
                   reasoning=reasoning_of(message), tool_calls=calls, finish_reason=choice.get("finish_reason"),
                   stop_reason=choice.get("stop_reason"), model=response.get("model"),
                   usage=Usage.from_chat(response.get("usage"), report))


@dataclass(frozen=True)
class ToolCallDelta:
    """A piece of a streamed function call: chat's tool call ``index`` says which call it
    continues; ``id`` and ``name`` come with the call's first piece."""

    index: int
    id: str | None
    name: str | None
    arguments: str


@dataclass(frozen=True)
class Delta:
    """What one ``chat.completion.chunk`` adds to the first choice (empty for a chunk without
    it, such as the final usage chunk).

    Attributes:
        text, reasoning: text and reasoning text added (``""``: none).
        tool_calls: pieces of function calls.
        finish_reason, stop_reason: as on :class:`Answer`, on the choice's last chunk.
        model: the chunk's ``model``, when it names one.
    """

    text: str = ""
    reasoning: str = ""
    tool_calls: tuple[ToolCallDelta, ...] = ()
    finish_reason: str | None = None
    stop_reason: str | int | None = None
    model: str | None = None

    @classmethod
    def from_chunk(cls, chunk: dict) -> "Delta":
        choice = next((c for c in chunk.get("choices") or () if isinstance(c, dict) and c.get("index", 0) == 0), None)
        if choice is None:
            return cls(model=chunk.get("model"))
        delta = choice.get("delta") or {}
        calls = tuple(ToolCallDelta(index=c.get("index", 0), id=c.get("id") or None,
                                    name=(c.get("function") or {}).get("name") or None,
                                    arguments=_text((c.get("function") or {}).get("arguments")))
                      for c in delta.get("tool_calls") or () if isinstance(c, dict))
        return cls(text=_text(delta.get("content")), reasoning=reasoning_of(delta), tool_calls=calls,
                   finish_reason=choice.get("finish_reason"), stop_reason=choice.get("stop_reason"),
                   model=chunk.get("model"))
