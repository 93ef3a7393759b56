"""Route-level quality bar: ``route_target`` = a share of the strongest, over the route's traffic.

A ``target: t`` bar asks *every request* for ``t`` of its best predicted quality: the
choice is the cheapest candidate predicting at least ``t x max(predicted quality)``. Each
request then clears ``t`` on its own, so the route as a whole over-delivers (on held-out
RouterBench rows ``target: 0.95`` realised 0.94-0.99 of always-GPT-4's quality at more
than half its cost, docs/CALIBRATION.md) and pays for it.

``route_target: t`` asks the *route*: over its last ``window`` requests, the summed
predicted quality of the choices must be at least ``t`` x the summed best predicted
quality (each request's strongest candidate), which is the quantity a RouterBench-style
evaluation reports (realised quality as a share of always-strongest). The engine keeps the
per-request rule and lowers its share ``s <= 1`` to the smallest value at which the window
still reaches ``t``: requests whose cheap candidates predict nearly as well as the best go
cheap, and the strong model is kept for the requests where the predicted gap is largest.
Minimising cost under one aggregate constraint by a single threshold on a per-item score
is the Lagrangian (dual) treatment of the multiple-choice knapsack (Sinha & Zoltners,
"The multiple-choice knapsack problem", Operations Research 27(3), 1979); ranking by the
share of the best rather than by absolute gain per dollar (the ``willingness_to_pay``
rule) is this module's choice, because on held-out RouterBench rows it realised more
quality per dollar for the same predicted share (docs/CALIBRATION.md).

Solve: for one request, as ``s`` rises the choice (the cheapest candidate predicting at
least ``s x best``) walks up the request's cost-quality Pareto frontier, moving from point
``j`` to ``j + 1`` once ``s`` exceeds ``q_j / best``. The window's summed quality at ``s``
is its sum at ``s = 0`` plus the gains of every step whose ratio is below ``s``. Gains are
summed in :data:`BUCKETS` ratio buckets, grouped in blocks of :data:`BLOCK` (a two-level
histogram), so adding a request and dropping the oldest cost two additions per step, and
the smallest bucket boundary ``s`` that reaches ``t`` is found on every request by two
prefix sums and binary searches over at most ``BUCKETS / BLOCK`` and ``BLOCK`` entries (no
periodic re-sort). ``s`` is a bucket boundary, so a choice may move up for a ratio up to
``1 / BUCKETS`` below the exact one. The request being decided is in the window, so a
route's first request gets ``t`` of its own best (the per-request rule) and the
route-level trade-off takes over as traffic arrives. Order matters as in any online
controller: a window that holds one kind of traffic only holds ``t`` on that kind.

Costs in USD; qualities are predicted probabilities of a good answer in [0, 1].
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections import deque
from itertools import accumulate
from collections.abc import Sequence

#: Requests kept when the policy does not say (``quality_bar.window``).
DEFAULT_WINDOW = 512
#: Buckets of the share in [0, 1] (resolution 1 / BUCKETS), and buckets per block.
BUCKETS = 1 << 12
BLOCK = 1 << 6
#: Requests after which the running sums are rebuilt from the window (float drift).
REBUILD_EVERY = 1 << 16


def share_steps(points: Sequence[tuple[float, float]]) -> tuple[float, float, list[tuple[float, float]]]:
    """The path of one request's choice as the share of its best rises.

    Args:
        points: ``(expected cost USD, predicted quality)`` per candidate (at least one).

    Returns:
        ``(q0, best, steps)``: the quality chosen at share 0 (the cheapest candidate, the
        best predicted among equally cheap ones), the best predicted quality, and
        ``[(ratio, gain)]`` in increasing ``ratio``: a share above ``ratio`` moves the
        choice to the next Pareto point, which predicts ``gain`` more.
        ``q0 + sum(gains) == best``.
    """
    frontier: list[tuple[float, float]] = []
    for c, q in sorted(points, key=lambda p: (p[0], -p[1])):
        if not frontier or q > frontier[-1][1]:
            frontier.append((c, q))
    best = frontier[-1][1]
    if best <= 0:
        return best, best, []
    return frontier[0][1], best, [(q1 / best, q2 - q1) for (_, q1), (_, q2) in zip(frontier, frontier[1:])]


class RouteTarget:
    """The per-request share of one route's ``route_target`` bar (module docstring).

    Args:
        target: share of the window's summed best predicted quality to keep, in (0, 1].
        window: requests kept (>= 1).

    Attributes:
        share: the per-request share in force (the engine's bar is ``share x best``).
        predicted: the window's predicted share of its best at ``share`` (>= ``target``
            up to float rounding).
    """

    def __init__(self, target: float, window: int = DEFAULT_WINDOW):
        self.target = float(target)
        self.window = int(window)
        self._rows: deque[tuple[float, float, array, array]] = deque()
        self._reset()
        self._added = 0
        self.share = self.target
        self.predicted = 1.0

    def __len__(self) -> int:
        return len(self._rows)

    def _reset(self) -> None:
        self._fine = [0.0] * BUCKETS
        self._coarse = [0.0] * (BUCKETS // BLOCK)
        self._have = self._best = 0.0

    def _push(self, row: tuple[float, float, array, array], sign: float) -> None:
        self._have += sign * row[0]
        self._best += sign * row[1]
        fine, coarse = self._fine, self._coarse
        for b, gain in zip(row[2], row[3]):
            fine[b] += sign * gain
            coarse[b // BLOCK] += sign * gain

    def add(self, points: Sequence[tuple[float, float]]) -> float:
        """Add one request's candidates ``[(cost USD, predicted quality)]``; return the
        share of its best predicted quality its choice must reach."""
        q0, best, steps = share_steps(points)
        # Rows keep their steps in flat arrays: a full window is then a few hundred objects
        # for the garbage collector to walk, not thousands of tuples.
        row = (q0, best, array("i", [min(int(r * BUCKETS), BUCKETS - 1) for r, _ in steps]),
               array("d", [g for _, g in steps]))
        self._rows.append(row)
        self._push(row, 1.0)
        if len(self._rows) > self.window:
            self._push(self._rows.popleft(), -1.0)
        self._added += 1
        if self._added % REBUILD_EVERY == 0:
            self._reset()
            for r in self._rows:
                self._push(r, 1.0)
        self._solve()
        return self.share

    def _solve(self) -> None:
        best = self._best
        missing = self.target * best - 1e-12 * max(1.0, best) - self._have
        if missing <= 0:
            self.share, self.predicted = 0.0, (self._have / best if best > 0 else 1.0)
            return
        blocks = list(accumulate(self._coarse))
        k = bisect_left(blocks, missing)  # the first block whose running sum reaches `missing`
        if k >= len(blocks):  # float rounding: even every step falls short
            self.share, self.predicted = 1.0, 1.0
            return
        before = blocks[k - 1] if k else 0.0
        inner = list(accumulate(self._fine[k * BLOCK:(k + 1) * BLOCK], initial=before))[1:]
        j = min(bisect_left(inner, missing), BLOCK - 1)
        self.share = (k * BLOCK + j + 1) / BUCKETS  # crosses buckets 0 .. k * BLOCK + j
        self.predicted = (self._have + inner[j]) / best
