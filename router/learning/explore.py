"""Exploration with logged propensities (the policy's ``learning.explore``).

With probability ``eps`` a request goes to a candidate drawn from the exploration set ``A``
with probability ``u(a)`` proportional to its estimate's standard deviation (uniform when
every estimate is exact), so the memory's uncertain backends get traffic and the certain
ones almost none; otherwise to the engine's own choice ``g`` (itself drawn with probability
``p_g`` by a ``route_target`` bar). The probability of the candidate actually sent,

    pi(a) = (1 - eps) x p_g x [a = g] + eps x u(a)

is recorded as the decision's ``probability`` (and ``signals.propensity``), which is what
inverse-propensity and doubly robust estimates of another policy divide by (Dudík,
Langford & Li, "Doubly robust policy evaluation and learning", ICML 2011). The engine's
own choice under ``route_target`` is taken as ``g`` with ``p_g``; its other side of the draw
is not re-derived here, so ``pi`` of that other candidate is its exploration share only.

``A`` is the candidates the engine already kept (rules, tenant allow lists, context
windows, expected and hard cost limits applied) that meet the route's TTFT SLO; on a route
that refuses below its bar (``on_no_candidate: reject``) only those that clear it. Budgets
are admitted after the decision like any other choice. Dry runs and requests of a session
already placed never explore.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from router.decision import Candidate


@dataclass(frozen=True)
class Pick:
    """The candidate sent, the probability it was sent with, and whether it was explored."""

    chosen: Candidate
    propensity: float
    explored: bool


def exploration_set(cands: Sequence[Candidate], bar_only: bool) -> list[Candidate]:
    """``A`` of the module docstring."""
    return [c for c in cands if c.meets_slo and (c.eligible or not bar_only)]


def shares(pool: Sequence[Candidate]) -> dict[str, float]:
    """``u(a)``: each candidate's share of the exploration draw, proportional to its
    estimate's standard deviation (uniform when none is uncertain)."""
    sds = [max(c.quality_sd or 0.0, 0.0) for c in pool]
    total = sum(sds)
    if not total > 0:
        return {c.backend: 1.0 / len(pool) for c in pool}
    return {c.backend: sd / total for c, sd in zip(pool, sds)}


def explore(eps: float, cands: Sequence[Candidate], chosen: Candidate, p_greedy: float,
            rng: random.Random, bar_only: bool = False) -> Pick:
    """Draw the candidate to send (module docstring).

    Args:
        eps: the share of requests that explore, in [0, 1).
        cands: the engine's candidates (already within rules and cost limits).
        chosen: the engine's own choice ``g``; p_greedy: the probability it was chosen with.
        rng: the draw's generator.
        bar_only: explore only among candidates that clear the bar.
    """
    pool = exploration_set(cands, bar_only)
    if eps <= 0 or len(pool) < 2:
        return Pick(chosen, p_greedy, False)
    u = shares(pool)
    if rng.random() < eps:
        pick = rng.choices(pool, weights=[u[c.backend] for c in pool])[0]
    else:
        pick = chosen
    p = eps * u.get(pick.backend, 0.0) + ((1.0 - eps) * p_greedy if pick is chosen else 0.0)
    return Pick(pick, p, pick is not chosen)
