"""The deployment's outcome memory: own-traffic observations blended into predicted quality.

Each observation ``i`` of a backend is a score ``s_i`` in [0, 1] (feedback, a retry's 0, a
judge's grade) of an answer for which the router had estimated ``p_i`` (its research-data
estimate, or the policy ``quality`` prior, before own traffic was counted), chosen with
probability ``pi_i`` (the decision's ``probability``). It counts

    c_i = weight(source_i) x 2 ** (-age_i / half_life)      (observations)
    v_i = 1 / max(pi_i, MIN_PROPENSITY)                     (importance)

(exponentially discounted sums as in discounted UCB for changing bandits: Garivier &
Moulines, ALT 2011; importance weights because the router's own choices correlate with the
prompts, e.g. long prompts to cheap models, so the plain mean of a backend's traffic is
biased; weighting by the inverse of the logged probability makes it an estimate over all
prompts (Horvitz & Thompson 1952), clipped to bound its variance: Bottou et al.,
"Counterfactual reasoning and learning systems", JMLR 14, 2013). Per backend:

    A = sum c_i v_i     B = sum c_i v_i^2     E = sum c_i v_i (s_i - p_i)
    n = A^2 / B         (effective observations: Kish's, = sum c_i when every v_i = 1)

For a request whose estimate for that backend is ``q`` (worth ``n0`` observations):

    q' = clip(q + (E / A) x n / (n0 + n), 0, 1)          sd' = sqrt(q' (1 - q') / (n0 + n + 1))

For a backend with no research data, ``q`` is its policy prior on every request, so ``q' =
(n0 q + n m) / (n0 + n)`` with ``m`` the weighted mean score: the mean of the conjugate
Beta posterior with prior ``Beta(n0 q, n0 (1 - q))`` after ``n`` observations of mean ``m``
(Gelman et al., Bayesian Data Analysis, 3rd ed., section 2.4), whose standard deviation is
``sd'`` (the Beta's variance ``ab / ((a + b)^2 (a + b + 1))``). Traffic alone decides once
``n >> n0``. With research data the same update moves the prompt-specific estimate by the
backend's average error, shrunk towards 0 by ``n0`` pseudo-observations, so prompts keep
their ranking while the level is corrected. ``n0`` is the research estimate's own
observation count, from its standard deviation (``q (1 - q) / sd^2 - 1``, the inverse of the
formula above; :func:`router.neighbours.posterior_sd`), capped at ``max_research_weight``;
the policy prior counts ``prior_weights[backend]``, else ``prior_weight``.

The memory is refreshed off the request path (the gateway reads the store's
observations periodically, so replicas share it); a request reads a few floats per
backend from a dict.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from math import isfinite, sqrt
from typing import Protocol

from backends.config import BackendConfig
from router.policy.learning_config import LearningConfig
from router.predict import UNKNOWN_QUALITY, Prediction

#: Observations older than this many half-lives are not read (weight below 2**-10).
HORIZON_HALF_LIVES = 10
#: Smallest selection probability an observation's importance weight divides by (weights
#: at most 1000; clipping trades a little bias for bounded variance).
MIN_PROPENSITY = 0.001


class Observed(Protocol):
    """One observation as the memory reads it."""

    backend: str
    score: float
    predicted: float | None
    probability: float | None
    source: str
    created_at: datetime


@dataclass(frozen=True)
class Tally:
    """One backend's discounted sums (module docstring): ``weight`` A, ``square`` B,
    ``error`` E and ``score`` (``sum c_i v_i s_i``)."""

    weight: float = 0.0
    square: float = 0.0
    error: float = 0.0
    score: float = 0.0

    @property
    def n(self) -> float:
        """Effective observations ``A^2 / B`` (0 with none)."""
        return self.weight * self.weight / self.square if self.square > 0 else 0.0

    @property
    def mean(self) -> float | None:
        """The weighted mean score of the backend's own traffic (``None``: none yet)."""
        return self.score / self.weight if self.weight > 0 else None

    @property
    def mean_error(self) -> float:
        """``E / A``: the backend's average error against its estimates (0 with none)."""
        return self.error / self.weight if self.weight > 0 else 0.0


def tally(rows: Iterable[Observed], config: LearningConfig, now: datetime,
          priors: dict[str, float]) -> dict[str, Tally]:
    """Per-backend discounted sums of ``rows`` at time ``now``.

    Args:
        rows: observations (scores in [0, 1]; times UTC).
        config: the policy's ``learning`` block (half-life, source weights).
        now: the time the weights are taken at (UTC).
        priors: backend -> the estimate used for an observation whose ``predicted`` is
            unknown (its policy prior).
    """
    half_life_s = config.half_life_hours * 3600.0
    weights = config.weights.model_dump()
    sums: dict[str, list[float]] = {}
    for r in rows:
        c = weights.get(r.source, 0.0) * 2.0 ** (-max((now - r.created_at).total_seconds(), 0.0) / half_life_s)
        if not c > 0 or not isfinite(r.score):
            continue
        v = 1.0 / max(r.probability if r.probability is not None else 1.0, MIN_PROPENSITY)
        p = r.predicted if r.predicted is not None else priors.get(r.backend, UNKNOWN_QUALITY)
        acc = sums.setdefault(r.backend, [0.0, 0.0, 0.0, 0.0])
        acc[0] += c * v
        acc[1] += c * v * v
        acc[2] += c * v * (r.score - p)
        acc[3] += c * v * r.score
    return {b: Tally(*v) for b, v in sums.items()}


def research_weight(quality: float, sd: float | None, config: LearningConfig, backend: str = "") -> float:
    """``n0``: how many observations an estimate counts as (module docstring); a prior
    (no ``sd``) counts the backend's ``prior_weights`` entry, else ``prior_weight``."""
    prior = config.prior_weights.get(backend, config.prior_weight)
    if sd is None or not sd > 0:
        return prior
    n = quality * (1.0 - quality) / (sd * sd) - 1.0
    return min(max(n, prior), config.max_research_weight)


class OutcomeMemory:
    """The deployment's own-traffic tallies, swapped whole on every refresh (one dict
    assignment, so a request never sees half a refresh), and an adapter version's
    per-domain offsets (:mod:`router.learning.from_logs`): backend -> domain -> a shift of
    the estimate of a request whose ``domain`` signal is that domain."""

    def __init__(self, offsets: dict[str, dict[str, float]] | None = None) -> None:
        self.tallies: dict[str, Tally] = {}
        self.offsets: dict[str, dict[str, float]] = offsets or {}

    def replace(self, tallies: dict[str, Tally]) -> None:
        self.tallies = tallies

    def adjust(self, prediction: Prediction, backends: Sequence[BackendConfig],
               config: LearningConfig | None) -> Prediction:
        """``prediction`` with each backend's quality and standard deviation blended with
        its own traffic (module docstring), plus its domain's offset; unchanged when
        ``config`` is ``None`` (the policy has no ``learning`` block). The estimates before
        blending are kept in ``signals.learning.before``, so observations of this request
        learn their error; offsets applied are in ``signals.learning.domain_offset``."""
        if config is None:
            return prediction
        tallies, offsets = self.tallies, self.offsets
        domain = prediction.signals.get("domain")
        shifts = {b: o[domain] for b, o in offsets.items() if isinstance(domain, str) and domain in o}
        quality, sd, before, seen = dict(prediction.quality), dict(prediction.quality_sd), {}, {}
        for b in backends:
            q = quality.get(b.name)
            if q is None:
                q = b.quality if b.quality is not None else UNKNOWN_QUALITY
            before[b.name] = q
            t = tallies.get(b.name, Tally())
            n0 = research_weight(q, prediction.quality_sd.get(b.name), config, b.name)
            n = t.n
            blended = min(max(q + t.mean_error * n / (n0 + n) + shifts.get(b.name, 0.0), 0.0), 1.0)
            quality[b.name] = round(blended, 6)
            sd[b.name] = round(sqrt(blended * (1.0 - blended) / (n0 + n + 1.0)), 6)
            seen[b.name] = round(n, 3)
        learned = {"before": before, "observations": seen}
        if shifts:
            learned["domain_offset"] = {b: round(v, 6) for b, v in shifts.items()}
        signals = {**prediction.signals, "learning": learned}
        return replace(prediction, quality=quality, quality_sd=sd, signals=signals)
