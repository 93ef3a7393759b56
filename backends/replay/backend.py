"""The ``replay`` backend: answers with the response a real model gave to the same
prompt in recorded outcome data (RouteLLM, RouterBench, RouterDC, MT-Bench files).

Policy entry::

    - name: gpt-4
      kind: replay
      model: gpt-4-1106-preview          # a model (column) of the data
      data: [../shared/data/routerbench/winograde_train.csv]
      pricing: {per_request: 0.00354}    # used when a row records no cost

Lookup: the request's last user message, else all its prompt text, whitespace-normalised
(:class:`backends.replay.index.ReplayIndex`). Answers:

- recorded row with response text: that text; ``cost_usd`` = the recorded
  ``total_cost`` (USD) of this model on this prompt when the data has one, else ``None``
  so the gateway prices the call from the policy's ``pricing``.
- recorded row without response text (RouteLLM MMLU, RouterDC, MT-Bench):
  ``[replay: no recorded response for <model>; recorded score <s>]``.
- prompt not in the data: HTTP 200 with
  ``[replay: prompt not in the recorded data for <model>]`` and ``cost_usd=None``. Not an
  error: a replay gateway stays usable for ad-hoc prompts (demos, smoke tests), and a
  non-retryable 400 would stop the dispatcher's fallback anyway; the bracketed text is
  unambiguous and ``mixroute replay`` only sends recorded prompts.

The data files are loaded once per process (see :func:`backends.replay.index.load_index`)
in a worker thread during :meth:`ReplayBackend.start`, or on first use.
"""

from __future__ import annotations

import asyncio

from backends.base import Endpoint
from backends.data import OutcomeRow
from backends.replay.index import ReplayIndex, load_model_index
from backends.synthetic import Answer, SyntheticBackend


def placeholder_no_response(model: str, score: float) -> str:
    """Answer text for a recorded row that has no response text for ``model``."""
    return f"[replay: no recorded response for {model}; recorded score {round(score, 4)}]"


def placeholder_unknown_prompt(model: str) -> str:
    """Answer text for a prompt the data does not hold."""
    return f"[replay: prompt not in the recorded data for {model}]"


class ReplayBackend(SyntheticBackend):
    """See module docstring."""

    _index: ReplayIndex | None = None

    async def start(self) -> None:
        """Load (or reuse) the data index in a worker thread.

        Raises:
            backends.data.DataFormatError: a data file is missing or of no known format,
                or ``model`` is not a model of the data.
        """
        await self.index()

    async def index(self) -> ReplayIndex:
        """The loaded index of ``config.data`` (loading it on first call)."""
        if self._index is None:
            self._index = await asyncio.to_thread(load_model_index, self.config.data, self.name, self.model)
        return self._index

    async def lookup(self, endpoint: Endpoint, body: dict) -> OutcomeRow | None:
        """The recorded row a request matches, or ``None``."""
        return (await self.index()).find(endpoint, body)

    async def recorded_score(self, endpoint: Endpoint, body: dict) -> float | None:
        """Recorded score in [0, 1] of this backend's model on the request's prompt."""
        row = await self.lookup(endpoint, body)
        return None if row is None else row.scores.get(self.model)

    async def answer(self, endpoint: Endpoint, body: dict) -> Answer:
        row = await self.lookup(endpoint, body)
        model = self.model
        if row is None or model not in row.scores:
            return Answer(text=placeholder_unknown_prompt(model))
        text = row.responses.get(model)
        if not text:
            text = placeholder_no_response(model, row.scores[model])
        return Answer(text=text, cost_usd=row.costs.get(model))
