"""The policy's ``learning:`` block: how routing learns from its own traffic.

Observations (feedback, retries, a judge) join the outcome memory
(:mod:`router.learning.memory`); a bounded share of requests explores candidates whose
estimate is uncertain (:mod:`router.learning.explore`). Without the block the gateway
still records observations, but decides on its predictors alone and never explores.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from backends.fields import Number, Strict


class SourceWeights(Strict):
    """How much one observation of each source counts, in observations of explicit feedback.

    Attributes:
        feedback: a score sent to ``POST /v1/feedback``.
        retry: the same prompt retried by the same tenant soon after the answer (a 0):
            weaker, since a client may resend for reasons other than a bad answer.
        judge: a grade from a judge model.
    """

    feedback: Number = Field(default=1.0, ge=0, le=100)
    retry: Number = Field(default=0.5, ge=0, le=100)
    judge: Number = Field(default=0.5, ge=0, le=100)


class LearningConfig(Strict):
    """The ``learning:`` block.

    Attributes:
        explore: share of a route's requests sent to a candidate chosen at random,
            weighted by how uncertain its estimate is, among the candidates rules,
            allow lists and cost limits leave (0: never explore).
        half_life_hours: an observation's weight halves every this many hours (hours).
        prior_weight: how many observations a backend's policy ``quality`` prior counts
            as, for a backend the predictor has no research data on.
        prior_weights: backend name -> its own ``prior_weight``, for priors that rest on
            more (or less) evidence than the rest, e.g. a prior that is a model's mean score
            over many recorded rows.
        max_research_weight: at most this many observations for a research-data estimate
            (its own count, from the classifier's outcome memory, can be in the hundreds,
            which would make the deployment's own traffic nearly irrelevant).
        retry_window_s: the same prompt from the same tenant within this many seconds
            after an answer counts as a retry of it (seconds).
        weights: weight per observation source (:class:`SourceWeights`).
    """

    explore: Number = Field(default=0.0, ge=0, le=0.5)
    half_life_hours: Number = Field(default=168.0, gt=0, le=24 * 3650)
    prior_weight: Number = Field(default=2.0, gt=0, le=10_000)
    prior_weights: dict[str, Annotated[float, Field(gt=0, le=1_000_000, allow_inf_nan=False)]] = Field(
        default_factory=dict)
    max_research_weight: Number = Field(default=50.0, gt=0, le=1_000_000)
    retry_window_s: Number = Field(default=30.0, gt=0, le=3600)
    weights: SourceWeights = SourceWeights()
