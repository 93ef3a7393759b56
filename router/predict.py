"""Quality and output-length prediction per candidate: the interface the decision engine
uses, and the baseline implementation used when no classifier is loaded.

The classifier (``router.classify``) implements the same :class:`Predictor` protocol
with its ``quality`` and ``output_length`` heads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from backends.config import BackendConfig

#: Prior quality assumed for a backend with neither a policy ``quality`` nor a head output.
UNKNOWN_QUALITY = 0.5
#: Expected completion length (tokens) when the request gives no ``max_tokens`` and no
#: output-length head is loaded; a round figure near the median chat completion length.
DEFAULT_OUTPUT_TOKENS = 256


@dataclass
class Prediction:
    """Per-request predictions.

    Attributes:
        quality: backend name -> probability in [0, 1] of a good answer.
        quality_sd: backend name -> standard deviation of that probability (the outcome
            memory's Beta posterior, :func:`router.neighbours.posterior_sd`); a backend
            missing here counts as 0 (its quality is taken as exact).
        output_tokens: expected completion tokens (before capping by ``max_tokens``).
        signals: other classifier signals (``domain``, ``difficulty``, ``pii``,
            ``injection``...), JSON-serialisable; stored in the decision row.
        source: which predictor produced it (``prior`` or ``classifier``).
    """

    quality: dict[str, float]
    quality_sd: dict[str, float] = field(default_factory=dict)
    output_tokens: int = DEFAULT_OUTPUT_TOKENS
    signals: dict[str, Any] = field(default_factory=dict)
    source: str = "prior"


class Predictor(Protocol):
    """Anything that predicts per-candidate quality for one prompt."""

    async def predict(self, text: str, backends: Sequence[BackendConfig]) -> Prediction:
        """Predict for the prompt ``text`` (all message text, joined) and ``backends``."""
        ...


class PriorPredictor:
    """Baseline: each backend's quality is its policy ``quality`` prior (or
    :data:`UNKNOWN_QUALITY`), independent of the prompt. With it, a route always picks
    the same backend; the classifier makes the choice per prompt."""

    async def predict(self, text: str, backends: Sequence[BackendConfig]) -> Prediction:
        return Prediction(
            quality={b.name: (b.quality if b.quality is not None else UNKNOWN_QUALITY) for b in backends}
        )
