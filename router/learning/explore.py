"""Exploration with logged propensities (the policy's ``learning.explore``).

With probability ``eps`` a request goes to a candidate drawn from the exploration set ``A``
with probability ``u(a)`` proportional to its estimate's standard deviation (uniform when
every estimate is exact), so the memory's uncertain backends get traffic and the certain
ones almost none; otherwise to the engine's own choice ``g`` (itself drawn with probability
``p_g`` by a ``route_target`` bar, whose other side would have chosen ``h``). The
probability of the candidate actually sent,

    pi(a) = (1 - eps) x (p_g x [a = g] + (1 - p_g) x [a = h]) + eps x u(a)

is recorded as the decision's ``probability`` (and ``signals.propensity``), which is what
inverse-propensity and doubly robust estimates of another policy divide by (Dudík,
Langford & Li, "Doubly robust policy evaluation and learning", ICML 2011). It is the
chance of ``a`` over every path to it: ``h`` sent by exploration after the draw took ``g``
has the same ``pi`` as ``h`` taken by the draw, which IPS needs (counting the exploration
share alone there overweighted those answers). The engine finds ``h`` by deciding the
other side of its draw again (:func:`other_choice`); with no draw there is no ``h``.

``A`` is the candidates the engine already kept (rules, tenant allow lists, context
windows, expected and hard cost limits applied) that meet the route's TTFT SLO; on a route
that refuses below its bar (``on_no_candidate: reject``) only those that clear it. Budgets
are admitted after the decision like any other choice. Dry runs and requests of a session
already placed never explore.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from math import isfinite

from router.aggregate import BAR_TOLERANCE
from router.choice import choose
from router.decision import Candidate
from router.errors import NoCandidate, RequestRejected
from router.policy.models import RouteConfig


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


def other_choice(route: RouteConfig, cands: Sequence[Candidate], held: dict[str, float], level: float,
                 lagrangian: bool, price: float | None,
                 bar: Callable[[list[Candidate], float | None, float | None], float]) -> Candidate | None:
    """``h``: the candidate the engine would have chosen on the other side of its
    ``route_target`` draw, at that side's ``level`` (the route share, or under ``lagrangian``
    the willingness to pay), decided on copies so that the request's own candidates keep
    what was decided. ``None`` when that side would refuse.

    Args:
        held: backend -> the quality the bar is tested on; price: the engine's
            willingness to pay outside ``lagrangian`` (a route's, or ``None``).
        bar: the engine's bar of some candidates at a ``(share, price)``.
    """
    copies = [replace(c) for c in cands]
    share, price = (None, level) if lagrangian else (level, price)
    if lagrangian and isfinite(level):
        for c in copies:
            c.utility_usd = level * held[c.backend] - c.expected_cost_usd
    line = bar(copies, share, price)
    for c in copies:
        c.eligible = held[c.backend] + BAR_TOLERANCE >= line
    try:
        picked, _ = choose(route, copies)
    except (NoCandidate, RequestRejected):
        return None
    return next(c for c in cands if c.backend == picked.backend)


def explore(eps: float, cands: Sequence[Candidate], chosen: Candidate, p_greedy: float,
            rng: random.Random, bar_only: bool = False, other: Candidate | None = None) -> Pick:
    """Draw the candidate to send (module docstring).

    Args:
        eps: the share of requests that explore, in [0, 1).
        cands: the engine's candidates (already within rules and cost limits).
        chosen: the engine's own choice ``g``; p_greedy: the probability it was chosen with.
        rng: the draw's generator.
        bar_only: explore only among candidates that clear the bar.
        other: ``h``, the engine's choice on the other side of its draw (chosen there with
            probability ``1 - p_greedy``); ``None`` when it did not draw.
    """
    pool = exploration_set(cands, bar_only)
    if eps <= 0 or len(pool) < 2:
        return Pick(chosen, p_greedy, False)
    greedy = {chosen.backend: p_greedy}
    if other is not None:
        greedy[other.backend] = greedy.get(other.backend, 0.0) + 1.0 - p_greedy
    u = shares(pool)
    if rng.random() < eps:
        pick = rng.choices(pool, weights=[u[c.backend] for c in pool])[0]
    else:
        pick = chosen
    p = eps * u.get(pick.backend, 0.0) + (1.0 - eps) * greedy.get(pick.backend, 0.0)
    return Pick(pick, p, pick is not chosen)
