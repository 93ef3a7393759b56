"""Among scored candidates, the one a route takes (:func:`choose`), and each candidate's
note on what counts against it (:func:`note`). Used by :class:`router.engine.Router`
(step 5 of its module docstring), which sets ``eligible``, ``meets_slo`` and the bar first.
"""

from __future__ import annotations

from router.decision import Candidate
from router.errors import NoCandidate, RequestRejected
from router.policy.models import RouteConfig


def _apart(low: float, high: float) -> tuple[str, str]:
    """``low`` and ``high`` (``low < high``) printed with 3 significant digits, or as many
    more as it takes for the two to read differently (up to 17, where floats are exact)."""
    for digits in range(3, 18):
        a, b = f"{low:.{digits}g}", f"{high:.{digits}g}"
        if a != b:
            break
    return a, b


def note(c: Candidate, held: float, bar: float, slo_s: float | None) -> str:
    """One line on what counts against ``c`` (``''`` when nothing does): its quality
    (``held``: the lower bound under ``route_target``, else the prediction) under the
    ``bar``, its predicted TTFT (seconds) over the route's SLO ``slo_s``; each pair printed
    with the digits that tell them apart."""
    parts = []
    if not c.eligible:
        what = "lower bound" if c.quality_bound is not None else "predicted quality"
        q, b = _apart(held, bar)
        parts.append(f"{what} {q} under the bar {b}")
    if not c.meets_slo and c.predicted_ttft_s is not None and slo_s is not None:
        slo, ttft = _apart(slo_s, c.predicted_ttft_s)
        parts.append(f"predicted TTFT {ttft} s over the SLO {slo} s")
    return "; ".join(parts)


def choose(route: RouteConfig, cands: list[Candidate]) -> tuple[Candidate, str]:
    """Pick a candidate among scored ones (``eligible`` and ``meets_slo`` already set).

    Returns:
        ``(candidate, reason)``; reasons: ``cheapest_above_bar`` (recorded as ``max_utility``
        under a ``willingness_to_pay`` bar, or a ``route_target`` bar with the ``lagrangian``
        allocation), ``only_candidate``,
        ``best_effort_slo`` / ``degraded_for_slo`` (every bar-clearing candidate breaks the
        TTFT SLO), ``below_bar_cheapest``, ``below_bar_best_quality``.

    Raises:
        NoCandidate: nothing clears the bar and ``on_no_candidate: reject``.
        RequestRejected: every bar-clearing candidate breaks the SLO and ``on_saturated: reject``.
    """
    order = {c.backend: i for i, c in enumerate(cands)}

    def cheapest(cs: list[Candidate]) -> Candidate:
        return min(cs, key=lambda c: (c.expected_cost_usd, -c.predicted_quality, order[c.backend]))

    eligible = [c for c in cands if c.eligible]
    fast = [c for c in eligible if c.meets_slo]
    if fast:
        return cheapest(fast), "cheapest_above_bar" if len(cands) > 1 else "only_candidate"
    if eligible:
        if route.on_saturated == "reject":
            wait = min(c.predicted_ttft_s or 1.0 for c in eligible) - (route.ttft_slo_s or 0.0)
            raise RequestRejected(f"Every backend of route '{route.name}' that clears its quality bar is "
                                  f"predicted to break its TTFT SLO of {route.ttft_slo_s} s", retry_after_s=max(1.0, wait))
        meeting = [c for c in cands if c.meets_slo]
        if route.on_saturated == "degrade" and meeting:
            return cheapest(meeting), "degraded_for_slo"
        return cheapest(eligible), "best_effort_slo"
    if route.on_no_candidate == "reject":
        best = max(cands, key=lambda c: (c.quality_bound if c.quality_bound is not None else c.predicted_quality,
                                         -order[c.backend]))
        tested = best.quality_bound if best.quality_bound is not None else best.predicted_quality
        kind = route.quality_bar.kind
        raise NoCandidate(f"No backend of route '{route.name}' is predicted to clear its quality bar "
                          f"({kind}: {getattr(route.quality_bar, kind)}; the best, '{best.backend}', is predicted "
                          f"{tested:.3f}{' at its lower bound' if best.quality_bound is not None else ''})")
    if route.on_no_candidate == "cheapest":
        return min(cands, key=lambda c: (c.expected_cost_usd, order[c.backend])), "below_bar_cheapest"
    return max(cands, key=lambda c: (c.predicted_quality, -order[c.backend])), "below_bar_best_quality"
