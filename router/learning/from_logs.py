"""Retraining from own logs: observations of a log -> an adapter version's outcome correction.

``mixroute train --from-logs`` reads a store (its observations, and those its feedback
and retries give that no gateway derived yet) or a ``mixroute logs export`` file (one
observation per request with a feedback score: the export keeps the mean score, not its
source or time, so every one counts as explicit feedback at its decision's time). The
newest ``holdout`` share of the observations, by time, is held out for ``mixroute eval
--adapters-version``; the rest are tallied into a :class:`router.learning.baked.Baked`
at the time of the newest one.

What can be rebuilt: prompts are never stored, so the classifier heads, which read the
prompt, cannot be retrained from logs; what the logs keep of each request is the router's
estimate per backend, the backend that answered and its score, which is exactly what the
outcome memory learns from (each backend's error against its estimates). The heads come
from the parent version, or from research data when it is given.

What the logs keep of the prompt is the classifier's signals; the ``domain`` signal lets a
version correct the quality head per domain too (:func:`domain_offsets`): a backend whose
estimates are right on average may be too high on code and too low on math, which one
error per backend cannot fix. Each (backend, domain) pair gets the difference between its
mean error and the backend's, shrunk towards 0 by :data:`DOMAIN_SHRINK` pseudo-observations
(a shrinkage estimator: Efron & Morris, "Data analysis using Stein's estimator and its
generalizations", JASA 70(350), 1975), so a domain seen a few times moves its estimates
little. The backend's own error stays in the tallies, applied to every request.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from router.eval.whatif import Logged
from router.learning.baked import Baked
from router.learning.memory import tally
from router.policy.learning_config import LearningConfig

#: Pseudo-observations a domain's own error is shrunk by (module docstring): with this
#: many effective observations of a backend in a domain, half of the domain's deviation
#: from the backend's mean error counts.
DOMAIN_SHRINK = 20.0


@dataclass(frozen=True)
class LogObservation:
    """One observation read from logs (the :class:`router.learning.memory.Observed` shape)."""

    request_id: str
    backend: str
    score: float
    predicted: float | None
    probability: float | None
    source: str
    created_at: datetime
    domain: str | None = None


def _time(value: Any) -> datetime:
    t = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def _estimate(signals: dict, candidates: list, backend: str) -> float | None:
    """``signals.learning.before[backend]``, else the candidate's ``predicted_quality``."""
    before = ((signals or {}).get("learning") or {}).get("before") or {}
    value = before.get(backend)
    if value is None:
        value = next((c.get("predicted_quality") for c in candidates if c.get("backend") == backend), None)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def from_export(rows: Iterable[dict[str, Any]]) -> list[LogObservation]:
    """The observations of export rows: each answered, routed request with a feedback score
    in [0, 1] (``feedback_score_mean``) gives one, of the backend that answered (the
    outcome's ``backend``, else ``chosen``), at the decision's time.

    Raises:
        ValueError: ``request ID: problem`` for a damaged row (the checks of
            :meth:`router.eval.whatif.Logged.from_row`, a bad time, a score outside [0, 1]).
    """
    out = []
    for raw in rows:
        row = Logged.from_row(raw)
        if row.refused or row.pinned or row.feedback is None:
            continue
        rid = row.request_id
        if not 0.0 <= row.feedback <= 1.0:
            raise ValueError(f"request {rid}: feedback_score_mean {row.feedback!r} is not in [0, 1]")
        try:
            at = _time(raw.get("created_at"))
        except (TypeError, ValueError):
            raise ValueError(f"request {rid}: created_at {raw.get('created_at')!r} is not an ISO 8601 time") from None
        backend = str(raw.get("backend") or row.chosen)
        domain = row.signals.get("domain")
        out.append(LogObservation(rid, backend, row.feedback, _estimate(row.signals, row.candidates, backend),
                                  row.probability if backend == row.chosen else None, "feedback", at,
                                  domain if isinstance(domain, str) else None))
    return out


def split(obs: Sequence[LogObservation], holdout: float) -> tuple[list[LogObservation], list[LogObservation],
                                                                     datetime | None]:
    """``(train, held_out, holdout_from)``: the newest ``holdout`` share held out, cut at a
    time (every observation at ``holdout_from`` or later is held out; ``None``: none is)."""
    ordered = sorted(obs, key=lambda o: o.created_at)
    cut = len(ordered) - int(round(len(ordered) * holdout))
    if cut >= len(ordered):
        return ordered, [], None
    start = ordered[cut].created_at
    while cut > 0 and ordered[cut - 1].created_at == start:
        cut -= 1
    return ordered[:cut], ordered[cut:], start


def domain_offsets(obs: Sequence[LogObservation], config: LearningConfig, at: datetime,
                   priors: dict[str, float]) -> dict[str, dict[str, float]]:
    """backend -> domain -> ``(e_bd - e_b) x n_bd / (n_bd + DOMAIN_SHRINK)``: the domain's
    mean error against the estimates minus the backend's, shrunk (module docstring); the
    errors and effective counts are the memory's (:func:`router.learning.memory.tally`,
    weighted by source, age at ``at`` and importance). Observations without a domain count
    for the backend only."""
    overall = tally(obs, config, at, priors)
    by_domain: dict[str, list[LogObservation]] = {}
    for o in obs:
        if o.domain:
            by_domain.setdefault(o.domain, []).append(o)
    out: dict[str, dict[str, float]] = {}
    for domain, rows in by_domain.items():
        for backend, t in tally(rows, config, at, priors).items():
            shift = (t.mean_error - overall[backend].mean_error) * t.n / (t.n + DOMAIN_SHRINK)
            if abs(shift) >= 1e-6:
                out.setdefault(backend, {})[domain] = round(max(min(shift, 1.0), -1.0), 6)
    return out


def bake(train: Sequence[LogObservation], config: LearningConfig, priors: dict[str, float]) -> Baked | None:
    """The correction of ``train``, at the time of its newest observation (``None``: empty)."""
    if not train:
        return None
    until = max(o.created_at for o in train)
    return Baked(until, tally(train, config, until, priors), domain_offsets(train, config, until, priors))
