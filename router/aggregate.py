"""Route-level quality bar: ``route_target`` = a share of the strongest, over the route's traffic.

``target: t`` asks every request for ``t`` of its own best predicted quality, so the route
as a whole over-delivers and pays for it. ``route_target: t`` asks the route: over its last
``window`` requests, the summed predicted quality of the choices is held at ``t`` x the
summed best (in expectation over the draws below), the quantity a RouterBench-style
evaluation reports. Minimising cost under that one aggregate constraint is a multiple-choice
knapsack; its Lagrangian treatment prices quality once for the whole window (Sinha &
Zoltners, "The multiple-choice knapsack problem", Operations Research 27(3), 1979).

Allocations:

- ``lagrangian`` (default): each request takes the candidate maximising ``w x quality -
  cost``, with the smallest ``w`` (USD per unit of quality) at which the window reaches
  ``t``: the LP optimum for the predicted qualities.
- ``share``: the per-request relative rule with the smallest route share ``s <= 1`` at
  which the window reaches ``t``.

Solve: as ``s`` (or ``w``) rises, a request's choice walks up its cost-quality Pareto
frontier (under ``lagrangian``, the frontier's upper concave hull, :func:`hull_steps`). The
gains of every step are summed in :data:`BUCKETS` ratio buckets grouped in blocks of
:data:`BLOCK`, so adding a request and dropping the oldest cost two additions per step, and
the smallest boundary reaching the goal is found by prefix sums and binary searches.

Ties: a request with a step in the last bucket the window needs crosses it with the
probability that makes the window's expected sum exactly the goal (the fractional item of
the LP relaxation), drawn from a generator seeded per controller; that probability is the
decision's ``probability`` for off-policy evaluation.

Feedback: the solve is counterfactual (it assumes earlier requests were decided at today's
share), so the controller also sums the quality of the choices actually made
(:meth:`RouteTarget.chose`, :meth:`RouteTarget.answered`) and moves the next goal by
:data:`GAIN` x the gap: up after a shortfall, down after a surplus. A surplus is spent
rather than kept, or traffic arriving task by task would buy each task's quality twice.

One controller per route and gateway process; the request being decided is in its own
window. Dry runs (``POST /v1/route``) use :meth:`RouteTarget.peek` and change nothing.
Measured results: docs/CALIBRATION.md and docs/BENCHMARKS.md.

Costs in USD; qualities are predicted probabilities of a good answer in [0, 1].
"""

from __future__ import annotations

import random
from array import array
from bisect import bisect_left
from collections import deque
from collections.abc import Sequence
from itertools import accumulate
from math import inf, isfinite, log10

#: Tolerance of the engine's bar test: a candidate clears ``bar`` when ``quality + BAR_TOLERANCE
#: >= bar`` (:data:`router.engine._EPS` is this value). Buckets use the same test, so a step the
#: solve counts as crossed is one the engine really crosses.
BAR_TOLERANCE = 1e-9
#: Requests kept when the policy does not say (``quality_bar.window``).
DEFAULT_WINDOW = 512
#: Buckets of the share in [0, 1] (resolution 1 / BUCKETS), and buckets per block.
BUCKETS = 1 << 12
BLOCK = 1 << 6
#: Under the ``lagrangian`` allocation the buckets are logarithmic in the incremental cost
#: per unit of quality (USD), from 10**LOG_LO to 10**LOG_HI (16 decades: a bucket is 0.9%
#: wide); a step outside is counted in the first or the last bucket.
LOG_LO, LOG_HI = -8.0, 8.0
#: The allocations: how a request's choice moves as the route needs more quality.
ALLOCATIONS = ("lagrangian", "share")
#: Requests after which the running sums are rebuilt from the window (float drift).
REBUILD_EVERY = 1 << 16
#: Sums below this count as empty (float leftovers of rows that left the window).
_MIN_SUM = 1e-9
#: Weight of the window's real shortfall (target - share held by the choices made) added
#: to the goal of the next solve (a proportional correction on a windowed integral; 4 held
#: a drifting stream within 0.01 of the target in a simulation, where 1 left 0.04).
GAIN = 4.0


def _by_cost(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The usable points (finite cost and quality; a negative quality counts as 0) by
    increasing cost, the better first among equally cheap ones."""
    usable = [(c, max(q, 0.0)) for c, q in points if isfinite(c) and isfinite(q)]
    usable.sort(key=lambda p: (p[0], -p[1]))
    return usable


def hull_steps(points: Sequence[tuple[float, float]]) -> tuple[float, float, list[tuple[float, float]]]:
    """The path of one request's choice as the price paid per unit of quality rises (the
    ``lagrangian`` allocation).

    The candidate maximising ``w x quality - cost`` for a willingness to pay ``w`` (USD per
    unit of predicted quality) lies on the upper concave hull of the ``(cost, quality)``
    points; as ``w`` rises from 0 it walks that hull from the cheapest point to the best,
    moving from point ``j`` to ``j + 1`` once ``w`` exceeds the segment's incremental cost
    per unit of quality ``(c_{j+1} - c_j) / (q_{j+1} - q_j)`` (increasing along the hull).
    Points under the hull are never chosen: a mix of their neighbours on the hull gives
    more quality for the same cost (the LP dominance of the multiple-choice knapsack,
    Sinha & Zoltners 1979).

    Args:
        points: ``(expected cost USD, predicted quality)`` per candidate, as
            :func:`share_steps`.

    Returns:
        ``(q0, best, steps)`` as :func:`share_steps`, with ``steps`` ``[(usd_per_quality,
        gain)]`` in increasing ``usd_per_quality``.
    """
    ordered = _by_cost(points)
    if not ordered:
        return 0.0, 0.0, []
    q0, best = ordered[0][1], max(q for _, q in ordered)  # share_steps' q0 and best
    if not best > 0:
        return best, best, []  # every quality 0: nothing to hold (as share_steps)
    hull: list[tuple[float, float]] = []
    for c, q in ordered:
        if hull and q <= hull[-1][1]:
            continue  # dominated: no cheaper and no better
        # Pop the last point while it lies on or under the segment from the one before to (c, q).
        while len(hull) >= 2 and ((hull[-1][1] - hull[-2][1]) * (c - hull[-2][0])
                                  <= (q - hull[-2][1]) * (hull[-1][0] - hull[-2][0])):
            hull.pop()
        hull.append((c, q))
    return q0, best, [((c2 - c1) / (q2 - q1), q2 - q1) for (c1, q1), (c2, q2) in zip(hull, hull[1:])]


def share_steps(points: Sequence[tuple[float, float]]) -> tuple[float, float, list[tuple[float, float]]]:
    """The path of one request's choice as the share of its best rises.

    Args:
        points: ``(expected cost USD, predicted quality)`` per candidate. Points whose cost
            or quality is not a finite number are left out; a negative quality counts as 0.

    Returns:
        ``(q0, best, steps)``: the quality chosen at share 0 (the cheapest candidate, the
        best predicted among equally cheap ones), the best predicted quality, and
        ``[(ratio, gain)]`` in increasing ``ratio``: a share above ``ratio`` moves the
        choice to the next Pareto point, which predicts ``gain`` more.
        ``q0 + sum(gains) == best``; ``(0, 0, [])`` when no point is usable.
    """
    frontier: list[tuple[float, float]] = []
    for c, q in _by_cost(points):
        if not frontier or q > frontier[-1][1]:
            frontier.append((c, q))
    if not frontier:
        return 0.0, 0.0, []
    best = frontier[-1][1]
    if best <= 0:
        return best, best, []
    return frontier[0][1], best, [(q1 / best, q2 - q1) for (_, q1), (_, q2) in zip(frontier, frontier[1:])]


class RouteTarget:
    """The per-request share of one route's ``route_target`` bar (module docstring).

    One instance per route and gateway process (:meth:`router.live.LiveState.route_target`):
    replicas of the gateway each hold the target on their own traffic, and a restart
    starts an empty window.

    Args:
        target: share of the window's summed best predicted quality to keep, in (0, 1].
        window: requests kept (>= 1).
        allocation: ``"lagrangian"``: each request takes the candidate maximising
            ``w x quality - cost`` with one willingness to pay ``w`` (USD per unit of
            predicted quality) for the whole window, the smallest that keeps it at the
            target (:func:`hull_steps`); ``"share"``: the cheapest candidate predicting at
            least ``s x`` its best, with the smallest such ``s`` (:func:`share_steps`).

    Attributes:
        level: what the last solve needs: the share ``s`` (``share``; the engine's bar is
            ``s x best``) or the willingness to pay ``w`` in USD per unit of quality
            (``lagrangian``; ``inf``: every request its best); the request that crosses
            its last bucket draws it or one bucket lower (below). ``share`` is an alias.
        probability: probability of the share :meth:`add` returned for the last request
            (1.0 unless it was drawn): the decision's selection probability, for
            off-policy evaluation.
        other_level: the level of the side of that draw not taken (``None``: not drawn),
            chosen with probability ``1 - probability``, so that exploration can record the
            chance the other side's choice really had (:mod:`router.learning.explore`).
        held: (property) the window's summed predicted quality of the choices actually made
            (as reported by :meth:`chose`) over its summed best; 1.0 before any choice.
    """

    def __init__(self, target: float, window: int = DEFAULT_WINDOW, allocation: str = "share"):
        if allocation not in ALLOCATIONS:
            raise ValueError(f"allocation {allocation!r}: one of {', '.join(ALLOCATIONS)}")
        self.target = float(target)
        self.window = int(window)
        self.allocation = allocation
        # Each row: [q0, best, bucket array, gain array, chosen quality or None]. Steps sit in
        # flat arrays so a full window is a few hundred objects for the garbage collector.
        self._rows: deque[list] = deque()
        self._reset()
        self._added = 0
        self._rng = random.Random(0)  # seeded: a replay of the same traffic decides the same
        self._bucket, self._p_high = -1, 1.0
        self._pending: list | None = None  # the row add() just added, until chose()
        self.level = self.target if allocation == "share" else 0.0
        self.probability = 1.0
        self.other_level: float | None = None

    @property
    def share(self) -> float:
        """:attr:`level` (named for the ``share`` allocation)."""
        return self.level

    def _edge(self, b: int) -> float:
        """The level at the lower boundary of bucket ``b`` (``0 <= b <= BUCKETS``)."""
        if self.allocation == "share":
            return b / BUCKETS
        return 10.0 ** (LOG_LO + b * (LOG_HI - LOG_LO) / BUCKETS)

    def _bucket_of(self, x: float, tol: float) -> int:
        if self.allocation == "share":
            b = int((x + tol) * BUCKETS)
        elif not x > 0:
            b = 0
        elif not isfinite(x):  # a step whose cost difference overflowed: the dearest there is
            b = BUCKETS - 1
        else:
            b = int((log10(x) - LOG_LO) / (LOG_HI - LOG_LO) * BUCKETS)
        return min(max(b, 0), BUCKETS - 1)

    def __len__(self) -> int:
        return len(self._rows)

    @property
    def held(self) -> float:
        """Share of the best held by the choices made in the window (see the class docstring)."""
        return self._chosen / self._chosen_best if self._chosen_best > _MIN_SUM else 1.0

    def _reset(self) -> None:
        self._fine = [0.0] * BUCKETS
        self._coarse = [0.0] * (BUCKETS // BLOCK)
        self._have = self._best = 0.0
        self._chosen = self._chosen_best = 0.0

    def _push(self, row: list, sign: float) -> None:
        self._have += sign * row[0]
        self._best += sign * row[1]
        if row[4] is not None:
            self._chosen += sign * row[4]
            self._chosen_best += sign * row[1]
        fine, coarse = self._fine, self._coarse
        for b, gain in zip(row[2], row[3]):
            fine[b] += sign * gain
            coarse[b // BLOCK] += sign * gain

    def _row(self, points: Sequence[tuple[float, float]]) -> list | None:
        q0, best, steps = (share_steps if self.allocation == "share" else hull_steps)(points)
        if not best > 0:
            return None  # nothing to hold: no usable prediction
        # A step moves the choice once the share exceeds (q_j + tolerance) / best (the
        # engine's test), so its bucket is taken from that, not from q_j / best.
        tol = BAR_TOLERANCE / best
        return [q0, best, array("i", [self._bucket_of(r, tol) for r, _ in steps]),
                array("d", [g for _, g in steps]), None, True]

    def add(self, points: Sequence[tuple[float, float]]) -> float:
        """Add one request's candidates ``[(cost USD, predicted quality)]`` to the window and
        return the :attr:`level` its choice must use (the share of its best predicted quality
        it must reach, or the willingness to pay); report the choice with :meth:`chose`. A
        request with no usable prediction is not added."""
        row = self._pending = self._row(points)
        self.probability, self.other_level = 1.0, None
        if row is None:
            return self.level
        self._rows.append(row)
        self._push(row, 1.0)
        if len(self._rows) > self.window:
            old = self._rows.popleft()
            self._push(old, -1.0)
            old[5] = False  # out of the window: a late answered() must not touch the sums
        self._added += 1
        if self._added % REBUILD_EVERY == 0:
            self._reset()
            for r in self._rows:
                self._push(r, 1.0)
        self._solve()
        return self._draw(row)

    def _draw(self, row: list) -> float:
        """The level for ``row``'s request: :attr:`level` (crossing the solve's last bucket)
        with probability ``p``, else one bucket lower; sets :attr:`probability`."""
        self.probability, self.other_level = 1.0, None
        if self._bucket < 0 or self._bucket not in row[2]:
            return self.level  # the last bucket holds none of this request's steps
        high = self._rng.random() < self._p_high
        self.probability = self._p_high if high else 1.0 - self._p_high
        self.other_level = self._edge(self._bucket) if high else self.level
        return self.level if high else self._edge(self._bucket)

    def peek(self, points: Sequence[tuple[float, float]]) -> float:
        """The level :meth:`add` would return, leaving the window exactly as it is (dry runs)."""
        row = self._row(points)
        if row is None:
            return self.level
        fine, coarse = self._fine, self._coarse
        touched = [(b, fine[b], coarse[b // BLOCK]) for b in row[2]]
        saved = self.level, self._bucket, self._p_high, self._have, self._best
        self._push(row, 1.0)
        try:
            self._solve()
            return self.level  # the higher side of a draw: a dry run shows the safe choice
        finally:
            for b, f, c in reversed(touched):  # restore the exact floats, not add-then-subtract
                fine[b], coarse[b // BLOCK] = f, c
            self.level, self._bucket, self._p_high, self._have, self._best = saved

    def chose(self, quality: float | None) -> list | None:
        """Report the predicted quality of the candidate chosen for the request the last
        :meth:`add` added (``None``: the request was refused). Once per request; a call
        after an :meth:`add` that added nothing is ignored. Returns the request's row, the
        handle :meth:`answered` takes, or ``None`` when nothing was recorded."""
        row, self._pending = self._pending, None
        if row is None or quality is None or not isfinite(quality) or not self._rows or self._rows[-1] is not row:
            return None
        row[4] = max(float(quality), 0.0)
        self._chosen += row[4]
        self._chosen_best += row[1]
        return row

    def answered(self, row: list | None, quality: float | None) -> None:
        """The request of ``row`` (from :meth:`chose`) was answered by a fallback whose
        predicted quality is ``quality``, not by its first choice: the choices actually made
        (the feedback sum) count the fallback instead. Ignored once the row has left the
        window, or for a missing or non-finite quality."""
        if row is None or not row[5] or row[4] is None or quality is None or not isfinite(quality):
            return
        quality = max(float(quality), 0.0)
        self._chosen += quality - row[4]
        row[4] = quality

    def _solve(self) -> None:
        best = self._best
        goal = self.target
        if self._chosen_best > _MIN_SUM:
            # Feedback on what was really chosen: the counterfactual solve below assumes the
            # window's earlier requests were decided at today's level. When traffic drifts they
            # were not, so a shortfall of the choices actually made raises the goal, and a
            # surplus lowers it, until the window's real share is back at the target.
            goal = min(max(goal + GAIN * (self.target - self._chosen / self._chosen_best), 0.0), 1.0)
        missing = goal * best - 1e-12 * max(1.0, best) - self._have
        self._bucket, self._p_high = -1, 1.0
        if missing <= 0:
            self.level = 0.0
            return
        blocks = list(accumulate(self._coarse))
        k = bisect_left(blocks, missing)  # the first block whose running sum reaches `missing`
        if k >= len(blocks):  # float rounding: even every step falls short
            self.level = 1.0 if self.allocation == "share" else inf
            return
        before = blocks[k - 1] if k else 0.0
        inner = list(accumulate(self._fine[k * BLOCK:(k + 1) * BLOCK], initial=before))
        j = min(bisect_left(inner, missing, 1) - 1, BLOCK - 1)  # inner[j + 1] >= missing > inner[j]
        bucket = k * BLOCK + j
        gain = self._fine[bucket]
        # Crossing bucket `bucket` in full overshoots; crossing it with probability p gives
        # the window's goal in expectation (the fractional item of the knapsack's LP
        # relaxation). Requests with no step in that bucket get the same choice either way.
        self._bucket = bucket
        self._p_high = min(max((missing - inner[j]) / gain, 0.0), 1.0) if gain > 0 else 1.0
        # Crosses buckets 0 .. bucket; the last bucket's upper edge under `lagrangian` is
        # infinite, since it also counts the steps dearer than 10**LOG_HI.
        self.level = inf if self.allocation == "lagrangian" and bucket == BUCKETS - 1 else self._edge(bucket + 1)
