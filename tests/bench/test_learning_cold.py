"""bench.learning_cold's convergence point, on made-up replay reports."""

from __future__ import annotations

from bench.learning_cold import convergence


def _report(rows: list[tuple[float, float]]) -> dict:
    return {"requests": [{"row": i, "model": "m", "score": q, "cost_usd": c} for i, (q, c) in enumerate(rows)]}


def test_the_first_request_from_which_the_run_stays_within() -> None:
    full = _report([(0.8, 1.0)] * 2000)
    # 700 poor requests, then as good as the full run: the trailing 500 are all good from 1200 on
    learning = _report([(0.5, 1.0)] * 700 + [(0.8, 1.0)] * 1300)
    assert convergence(learning, full) == 1200
    # within tolerance: 1.5 quality points under and 9% dearer counts as within
    assert convergence(_report([(0.785, 1.09)] * 2000), full) == 500
    # too dear throughout, or within once and then out again at the end: never / not at the end
    assert convergence(_report([(0.8, 1.2)] * 2000), full) is None
    assert convergence(_report([(0.8, 1.0)] * 1500 + [(0.5, 1.0)] * 500), full) is None
    # cheaper or better than the full run is within
    assert convergence(_report([(0.9, 0.5)] * 2000), full) == 500


def test_runs_are_compared_on_the_same_rows() -> None:
    full = _report([(0.8, 1.0)] * 1000 + [(0.2, 1.0)] * 1000)  # the last 1000 prompts are hard for everyone
    learning = _report([(0.8, 1.0)] * 1000 + [(0.2, 1.0)] * 1000)
    assert convergence(learning, full) == 500
    learning["requests"] = learning["requests"][::-1]  # sent in another order: still paired by row
    full["requests"] = full["requests"][::-1]
    assert convergence(learning, full) == 500
