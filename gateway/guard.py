"""The guard of a promoted adapter version (the policy's ``learning.guard``).

Per route, the newest ``window`` decisions the version made since it was promoted that
have a feedback or judge score (observations, :mod:`gateway.store.observations`) are
measured: their mean score ``m``, its standard deviation ``s`` over ``n`` of them, and the
mean of the bars those decisions were held to (``signals.bar``). With at least
``min_feedback`` scores, the route is in breach when even the optimistic bound

    m + z x s / sqrt(n)  <  mean bar

is under the bar: a one-sided normal bound on the mean (the central limit theorem over
the answers' scores), so that one unlucky answer does not roll a version back and ``z``
says how sure the guard must be. Retries are not counted: a resend says less about the
answer than a grade. :class:`gateway.adapters.AdapterWatcher` rolls a version in breach
back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from math import sqrt

from sqlalchemy import Engine, select

from gateway.store.models import Decision, Observation
from router.policy.learning_config import GuardConfig

#: Observation sources the guard measures.
SOURCES = ("feedback", "judge")


@dataclass(frozen=True)
class Breach:
    """A route whose answers under the version score below its bar."""

    route: str
    n: int
    mean: float
    bound: float
    bar: float

    def reason(self) -> str:
        return (f"route {self.route}: mean feedback {self.mean:.3f} over {self.n} answers, upper bound "
                f"{self.bound:.3f} under the bar {self.bar:.3f}")


def _bar(signals: object) -> float | None:
    bar = signals.get("bar") if isinstance(signals, dict) else None
    return float(bar) if isinstance(bar, (int, float)) and not isinstance(bar, bool) else None


def breaches(engine: Engine, version: str, since: datetime | None, routes: Sequence[str],
             config: GuardConfig) -> list[Breach]:
    """The routes in breach (module docstring), worst first (blocking).

    Raises:
        sqlalchemy.exc.SQLAlchemyError: the store cannot be read.
    """
    q = (select(Decision.route, Observation.score, Decision.signals)
         .join(Decision, Decision.request_id == Observation.request_id)
         .where(Decision.adapter_version == version, Decision.route.in_(list(routes)),
                Observation.source.in_(SOURCES))
         .order_by(Decision.created_at.desc())
         .limit(config.window * max(len(routes), 1)))
    if since is not None:  # a decision's observations come after it: both bounds use an index
        q = q.where(Decision.created_at >= since, Observation.created_at >= since)
    per_route: dict[str, list[tuple[float, float]]] = {}
    with engine.connect() as conn:
        for route, score, signals in conn.execute(q):
            bar = _bar(signals)
            kept = per_route.setdefault(route, [])
            if bar is not None and len(kept) < config.window:
                kept.append((float(score), bar))
    out = []
    for route, rows in per_route.items():
        n = len(rows)
        if n < config.min_feedback:
            continue
        mean = sum(s for s, _ in rows) / n
        sd = sqrt(sum((s - mean) ** 2 for s, _ in rows) / (n - 1)) if n > 1 else 0.0
        bound = mean + config.z * sd / sqrt(n)
        bar = sum(b for _, b in rows) / n
        if bound < bar:
            out.append(Breach(route, n, round(mean, 6), round(bound, 6), round(bar, 6)))
    return sorted(out, key=lambda b: b.bound - b.bar)
