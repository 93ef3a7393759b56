"""The policy's ``learning:`` block: how routing learns from its own traffic.

Observations (feedback, retries, a judge) join the outcome memory
(:mod:`router.learning.memory`); a bounded share of requests explores candidates whose
estimate is uncertain (:mod:`router.learning.explore`). Without the block the gateway
still records observations, but decides on its predictors alone and never explores.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator, model_validator

from backends.fields import Integer, Number, Strict
from router.learning.versions import VERSION_ID

#: The judge's rubric when the policy gives none: what a good answer is, in one paragraph.
DEFAULT_RUBRIC = ("Grade how well the answer serves the request: correct, complete, on topic, in the language "
                  "asked, and following the request's instructions and format. A wrong, evasive or "
                  "truncated answer is poor.")


class SourceWeights(Strict):
    """How much one observation of each source counts, in observations of explicit feedback.

    Attributes:
        feedback: a score sent to ``POST /v1/feedback``.
        retry: the same prompt retried by the same tenant and key soon after the answer (a 0):
            weaker, since a client may resend for reasons other than a bad answer.
        judge: a grade from a judge model.
    """

    feedback: Number = Field(default=1.0, ge=0, le=100)
    retry: Number = Field(default=0.5, ge=0, le=100)
    judge: Number = Field(default=0.5, ge=0, le=100)


class JudgeConfig(Strict):
    """``learning.judge``: a model that grades a sampled share of answers, off the request path.

    Attributes:
        backend: the policy backend that grades (any backend; its calls are priced with its
            pricing and recorded under the route ``(judge)``).
        sample: share of answered requests graded, 0 to 1.
        rubric: what a good answer is, sent to the judge with each prompt and answer; the
            judge is asked for a score in [0, 1] whatever the rubric says.
        max_usd_per_day: USD the judge may spend per UTC day; a grade whose worst-case cost
            (its prompt, and ``max_tokens`` of output) would pass it is skipped (USD).
        max_tokens: output tokens the judge may write per grade (tokens).
    """

    backend: str = Field(min_length=1, max_length=200)
    sample: Number = Field(default=0.01, ge=0, le=1)
    rubric: str = Field(default=DEFAULT_RUBRIC, min_length=1, max_length=20_000)
    max_usd_per_day: Number = Field(ge=0, le=1_000_000)
    max_tokens: Integer = Field(default=64, ge=1, le=4096)


class GuardConfig(Strict):
    """``learning.guard``: roll a promoted adapter version back when its answers fall below
    the bar (:mod:`gateway.guard`).

    Attributes:
        window: per route, the newest this many of the version's decisions with a feedback
            (or judge) score are measured (decisions).
        min_feedback: scores needed before the guard judges a route (decisions).
        z: how sure: rolled back when ``mean score + z x sd / sqrt(n)`` is under the mean
            bar of those decisions (a one-sided normal bound; 0: on the mean alone).
    """

    window: Integer = Field(default=200, ge=1, le=1_000_000)
    min_feedback: Integer = Field(default=30, ge=1, le=1_000_000)
    z: Number = Field(default=2.0, ge=0, le=10)

    @model_validator(mode="after")
    def _enough_in_the_window(self) -> "GuardConfig":
        if self.min_feedback > self.window:
            raise ValueError(f"min_feedback ({self.min_feedback}) cannot exceed window ({self.window}): "
                             "the guard would never judge")
        return self


class LearningConfig(Strict):
    """The ``learning:`` block.

    Attributes:
        explore: share of a route's requests sent to a candidate chosen at random,
            weighted by how uncertain its estimate is, among the candidates rules,
            allow lists and cost limits leave (0: never explore).
        seed: the seed of exploration's draws (each policy load starts the same sequence,
            so replaying the same traffic decides the same; another seed, other draws).
        half_life_hours: an observation's weight halves every this many hours (hours).
        prior_weight: how many observations a backend's policy ``quality`` prior counts
            as, for a backend the predictor has no research data on.
        prior_weights: backend name -> its own ``prior_weight``, for priors that rest on
            more (or less) evidence than the rest, e.g. a prior that is a model's mean score
            over many recorded rows.
        max_research_weight: at most this many observations for a research-data estimate
            (its own count, from the classifier's outcome memory, can be in the hundreds,
            which would make the deployment's own traffic nearly irrelevant).
        retry_window_s: the same prompt from the same tenant and API key within this many
            seconds after an answer counts as a retry of it (seconds).
        weights: weight per observation source (:class:`SourceWeights`).
        judge: the judge that grades a sampled share of answers (:class:`JudgeConfig`;
            ``None``: no judge).
        shadow: an adapter version computed beside every routed decision and recorded in
            its ``signals.shadow``, never acted on (``None``: none).
        guard: automatic rollback of a promoted adapter version (:class:`GuardConfig`;
            ``None``: none).
    """

    explore: Number = Field(default=0.0, ge=0, le=0.5)
    seed: Integer = Field(default=0, ge=0, le=2**63 - 1)
    half_life_hours: Number = Field(default=168.0, gt=0, le=24 * 3650)
    prior_weight: Number = Field(default=2.0, gt=0, le=10_000)
    prior_weights: dict[str, Annotated[float, Field(gt=0, le=1_000_000, allow_inf_nan=False)]] = Field(
        default_factory=dict)
    max_research_weight: Number = Field(default=50.0, gt=0, le=1_000_000)
    retry_window_s: Number = Field(default=30.0, gt=0, le=3600)
    weights: SourceWeights = SourceWeights()
    judge: JudgeConfig | None = None
    shadow: str | None = None
    guard: GuardConfig | None = None

    @field_validator("shadow")
    @classmethod
    def _version_id(cls, shadow: str | None) -> str | None:
        if shadow is not None and not VERSION_ID.match(shadow):
            raise ValueError(f"{shadow[:80]!r} is not an adapter version id (letters, digits, '.', '_' or '-', "
                             "up to 64; `mixroute adapters list`)")
        return shadow
