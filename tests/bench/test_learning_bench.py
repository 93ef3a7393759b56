"""bench.learning_cold's convergence point and bench.learning_task's figures, on made-up
replay reports and rows."""

from __future__ import annotations

import pytest

from backends.data.types import OutcomeRow
from bench.learning_cold import convergence
from bench.learning_task import aiqs, policy_for, second_half, single_models, task_files


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


def test_the_task_split_and_its_policies(tmp_path) -> None:
    for name in ("arc_challenge_train.csv", "mbpp_train.csv", "winograde_train.csv", "README.md"):
        (tmp_path / name).write_text("")
    mine, others = task_files(tmp_path, "mbpp")
    assert [p.name for p in mine] == ["mbpp_train.csv"]
    assert [p.name for p in others] == ["arc_challenge_train.csv", "winograde_train.csv"]
    base = {"backends": [{"name": "a", "data": ["x.csv"], "quality": 0.7}],
            "routes": [{"name": "auto", "backends": ["a"], "quality_bar": {"route_target": 0.95}}]}
    plain = policy_for(base, "no-learning", 0.01, 0.05, 5, ["/data"])
    learning = policy_for(base, "learning", 0.01, 0.05, 5, ["/data"])
    assert plain["routes"][0]["quality_bar"] == {"willingness_to_pay": 0.01} and "learning" not in plain
    assert plain["backends"][0]["data"] == ["/data"] and base["backends"][0]["data"] == ["x.csv"]
    assert learning["learning"] == {"explore": 0.05, "prior_weights": {"a": 5}}


def test_second_half_points_and_aiq() -> None:
    report = {"requests": [{"row": i, "model": "m", "score": float(i >= 2), "cost_usd": 1.0} for i in range(4)]}
    assert [r["row"] for r in second_half(report)] == [2, 3]
    rows = [OutcomeRow(prompt=str(i), scores={"cheap": 0.0 if i % 2 else 1.0, "dear": 1.0},
                       costs={"cheap": 1.0, "dear": None}) for i in range(4)]
    singles = single_models(rows, [2, 3], {"cheap": 9.0, "dear": 3.0})
    assert singles == {"cheap": (1.0, 0.5), "dear": (3.0, 1.0)}  # a recorded cost, else the per-call price
    # the zero router's hull runs from (1, 0.5) to (3, 1): area 1.5 over a range of 2
    got = aiqs({"learning": [(3.0, 1.0)], "no-learning": [(1.0, 0.5)]}, singles)
    assert got["zero router"] == pytest.approx(0.75)
    assert got["learning"] == pytest.approx(0.0)  # a lone point at the range's end encloses nothing
    assert got["no-learning"] == pytest.approx(0.5)
