"""Base for backends that synthesize their answers in process (``fake``, ``replay``).

A subclass implements :meth:`SyntheticBackend.answer`; this class turns the answer into
OpenAI response objects and SSE chunks (one chunk per word), with usage from the token
estimate of :func:`backends.openai_shapes.estimate_tokens`.

With ``n > 1`` every choice carries the same answer: a response lists choices ``0..n-1``,
a stream interleaves chunks of every index (role, each word, tool calls, finish), and
usage counts the completion tokens of all ``n`` choices, streaming or not. A legacy
completion whose ``prompt`` is a list answers each prompt on its own, as the OpenAI API
and vLLM do: choice ``i * n + j`` is the ``j``-th answer to prompt ``i``, and usage sums
over the prompts.
"""

from __future__ import annotations

import asyncio
import re
from abc import abstractmethod
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from backends import openai_shapes as shapes
from backends.base import Backend, Endpoint
from backends.call import NO_CONTEXT, CallContext, CallReport
from backends.errors import BackendStreamError

_WORDS = re.compile(r"\S+\s*|\s+")


@dataclass
class Answer:
    """What a synthetic backend answers.

    Attributes:
        text: the completion text.
        tool_calls: OpenAI ``tool_calls`` list (chat only); finish_reason becomes ``tool_calls``.
        cost_usd: the real cost of this call when known (recorded data), else ``None``.
        first_token_delay_s: simulated TTFT (seconds); token_delay_s: simulated ITL.
        fail_after_chunks: end the stream with :class:`BackendStreamError` after this many chunks.
        finish_reason: ``stop`` or ``length``; ``None`` derives it (``tool_calls`` when there
            are tool calls, else ``stop``).
    """

    text: str
    tool_calls: list[dict] = field(default_factory=list)
    cost_usd: float | None = None
    first_token_delay_s: float = 0.0
    token_delay_s: float = 0.0
    fail_after_chunks: int | None = None
    finish_reason: str | None = None

    @property
    def finish(self) -> str:
        """The choice's ``finish_reason``."""
        return self.finish_reason or ("tool_calls" if self.tool_calls else "stop")


def _n(body: dict) -> int:
    return int(body.get("n") or 1)


def _per_prompt(endpoint: Endpoint, body: dict) -> list[dict]:
    """The bodies answered one by one: one per prompt of a legacy completion's list, else ``body``."""
    prompt = body.get("prompt")
    if endpoint == "chat" or not isinstance(prompt, list) or len(prompt) < 2:
        return [body]
    return [{**body, "prompt": p} for p in prompt]


class SyntheticBackend(Backend):
    """Backend answering from :meth:`answer`; see module docstring."""

    @abstractmethod
    async def answer(self, endpoint: Endpoint, body: dict) -> Answer:
        """Produce the answer for ``body``; may raise :class:`backends.errors.BackendError`."""

    async def _answers(self, endpoint: Endpoint, body: dict) -> list[tuple[dict, Answer]]:
        """``(body, answer)`` for each prompt of ``body`` (see :func:`_per_prompt`)."""
        return [(b, await self.answer(endpoint, b)) for b in _per_prompt(endpoint, body)]

    def _usage(self, endpoint: Endpoint, answers: list[tuple[dict, Answer]]) -> dict:
        """Usage of the whole response: each prompt once, completion tokens summed over the
        ``n`` (identical) choices of each prompt."""
        prompt = completion = 0
        for body, answer in answers:
            per_choice = shapes.estimate_tokens(answer.text) + sum(
                shapes.estimate_tokens(c["function"]["arguments"]) + 4 for c in answer.tool_calls
            )
            prompt += shapes.estimate_tokens(shapes.prompt_text(endpoint, body))
            completion += per_choice * _n(body)
        return shapes.usage(prompt, completion)

    @staticmethod
    def _cost(answers: list[tuple[dict, Answer]]) -> float | None:
        """The recorded cost (USD) of all prompts, or ``None`` unless every one is known."""
        costs = [a.cost_usd for _, a in answers]
        return None if any(c is None for c in costs) else sum(costs)

    async def send(self, endpoint: Endpoint, body: dict, *, context: CallContext = NO_CONTEXT,
                   report: CallReport | None = None) -> dict:
        answers = await self._answers(endpoint, body)
        answer = answers[0][1]
        if any(a.fail_after_chunks is not None for _, a in answers):
            from backends.errors import BackendServerError

            raise BackendServerError(f"{self.name}: upstream closed the connection", backend=self.name)
        await asyncio.sleep(answer.first_token_delay_s)
        use = self._usage(endpoint, answers)
        n = _n(body)
        if endpoint == "chat":
            message: dict = {"role": "assistant", "content": answer.text or None, "refusal": None}
            if answer.tool_calls:
                message["tool_calls"] = answer.tool_calls
            out = shapes.chat_completion(self.model, message, answer.finish, use, n)
        else:
            out = shapes.text_completion(self.model, answer.text, answer.finish, use, n)
            out["choices"] = [{"index": k * n + j, "text": a.text, "logprobs": None, "finish_reason": a.finish}
                              for k, (_, a) in enumerate(answers) for j in range(n)]
        if report is not None:
            report.cost_usd = self._cost(answers)
        return out

    async def stream(self, endpoint: Endpoint, body: dict, *, context: CallContext = NO_CONTEXT,
                     report: CallReport | None = None) -> AsyncIterator[dict]:
        answers = await self._answers(endpoint, body)
        await asyncio.sleep(answers[0][1].first_token_delay_s)
        cid = shapes.new_id("chatcmpl" if endpoint == "chat" else "cmpl")
        sent, n = 0, _n(body)
        for k, (_, answer) in enumerate(answers):
            for chunk in self._chunks(endpoint, cid, answer, n, first=k * n):
                if answer.fail_after_chunks is not None and sent >= answer.fail_after_chunks:
                    raise BackendStreamError(f"{self.name}: upstream dropped the stream", backend=self.name)
                if sent and answer.token_delay_s:
                    await asyncio.sleep(answer.token_delay_s)
                sent += 1
                yield chunk
        obj = "chat.completion.chunk" if endpoint == "chat" else "text_completion"
        last = shapes.usage_chunk(cid, self.model, obj, self._usage(endpoint, answers))
        if report is not None:
            report.cost_usd = self._cost(answers)
        yield last

    def _chunks(self, endpoint: Endpoint, cid: str, answer: Answer, n: int = 1, first: int = 0):
        """Chunks of the ``n`` choices ``first..first+n-1``, interleaved step by step as an upstream sends them."""
        words = _WORDS.findall(answer.text)
        indices = range(first, first + n)
        if endpoint == "chat":
            for i in indices:
                yield shapes.chat_chunk(cid, self.model, {"role": "assistant", "content": ""}, index=i)
            for w in words:
                for i in indices:
                    yield shapes.chat_chunk(cid, self.model, {"content": w}, index=i)
            for k, call in enumerate(answer.tool_calls):
                for i in indices:
                    yield shapes.chat_chunk(cid, self.model, {"tool_calls": [{"index": k, **call}]}, index=i)
            for i in indices:
                yield shapes.chat_chunk(cid, self.model, {}, answer.finish, index=i)
        else:
            for w in words:
                for i in indices:
                    yield shapes.text_chunk(cid, self.model, w, index=i)
            for i in indices:
                yield shapes.text_chunk(cid, self.model, "", answer.finish, index=i)
