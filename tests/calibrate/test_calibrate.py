"""Calibration on synthetic rows: monotonicity in the threshold, the pick meets its bound,
an unreachable target is reported."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from router.calibration import TargetUnreachable, calibrate, load_rows
from router.calibration.bound import evaluate, resample_weights
from router.calibration.simulate import Sweep, data_columns, decide_rows, sweep, with_bar
from router.policy import QualityBar, load_policy
from router.predict import Prediction
from tests.calibrate.conftest import MODELS, TopicPredictor

GRIDS = {"min_quality": np.round(np.arange(0.0, 1.0001, 0.05), 2), "target": np.round(np.arange(0.5, 1.0001, 0.05), 2)}


def _setup(policy_file, nested_csv):
    loaded = load_policy(policy_file)
    rows = load_rows([nested_csv])
    return loaded, rows, data_columns(loaded, loaded.policy.route("auto"), rows.models)


@pytest.mark.parametrize("noise", [0.0, 0.05])
def test_cost_and_quality_rise_with_the_threshold(policy_file, tmp_path, noise):
    from tests.calibrate.conftest import write_nested

    loaded, rows, cols = _setup(policy_file, write_nested(tmp_path / "n.csv", noise=noise))
    sweeps = sweep(loaded, "auto", rows.prompts, TopicPredictor(), cols, GRIDS)
    weights = resample_weights(rows.n, 200, 0)
    strong = rows.models.index("large")
    for sw in sweeps:
        points = evaluate(sw, rows.scores, rows.costs, strong, rows.models, confidence=0.9, weights=weights)
        cost = [p.cost_ratio for p in points]
        ratio = [p.ratio for p in points]
        assert cost == sorted(cost), sw.param
        # without noise a stronger model never scores lower; with it, only in expectation
        assert (np.diff(ratio) >= -2 * noise).all(), sw.param
        assert cost[-1] > cost[0] and ratio[-1] > 0.9


@settings(max_examples=25, deadline=None)
@given(st.lists(st.lists(st.floats(0, 1), min_size=3, max_size=3), min_size=5, max_size=15))
def test_each_request_costs_no_less_at_a_higher_threshold(qualities):
    """For any predictions, raising the bar never moves a request to a cheaper backend
    (on_no_candidate: best_quality), for both parametrisations."""
    from router.policy import parse_policy
    from tests.calibrate.conftest import POLICY

    loaded = parse_policy(POLICY)
    table = {f"p{i}": dict(zip(MODELS, q)) for i, q in enumerate(qualities)}

    class Fixed:
        async def predict(self, text, backends):
            return Prediction(quality={b.name: table[text][b.model] for b in backends})

    cols = {"small": 0, "medium": 1, "large": 2}
    for sw in sweep(loaded, "auto", list(table), Fixed(), cols, GRIDS):
        price = np.array([p for p, _ in MODELS.values()])[sw.choices]  # (T, n)
        assert (np.diff(price, axis=0) >= 0).all(), sw.param


def test_pick_is_the_cheapest_meeting_its_bound_on_its_own_data(policy_file, nested_csv):
    loaded, rows, cols = _setup(policy_file, nested_csv)
    res = calibrate(loaded, "auto", rows, TopicPredictor(), target=0.95, confidence=0.9, resamples=500,
                    grids=GRIDS)
    p = res.chosen
    assert p.lower >= 0.95 and p.ci[0] <= p.ratio <= p.ci[1] and p.n == rows.n
    assert res.strongest == "large" and p.cost_ratio < 0.6
    assert not [q for q in res.points if q.lower >= 0.95 and q.cost_ratio < p.cost_ratio]
    # the same bar, decided afresh through the engine, realises the reported ratio
    chosen = asyncio.run(decide_rows(with_bar(loaded, "auto", QualityBar(**{p.param: p.threshold})), "auto",
                                     rows.prompts, TopicPredictor(), cols))
    realised = rows.scores[np.arange(rows.n), chosen].sum() / rows.scores[:, 2].sum()
    assert realised == pytest.approx(p.ratio)
    # and the uncalibrated relative bar is reported on the same rows
    assert res.current.param == "target" and res.current.threshold == 0.95


def test_holdout_rows_are_not_used_for_the_pick(policy_file, nested_csv):
    loaded, rows, _ = _setup(policy_file, nested_csv)
    res = calibrate(loaded, "auto", rows, TopicPredictor(), target=0.9, resamples=500, holdout=0.4, grids=GRIDS)
    assert res.holdout is not None and res.holdout.n + res.chosen.n == rows.n
    assert 0.25 * rows.n < res.holdout.n < 0.55 * rows.n
    assert (res.holdout.param, res.holdout.threshold) == (res.chosen.param, res.chosen.threshold)


def test_unreachable_target_says_the_best_bound(policy_file, nested_csv):
    loaded, rows, _ = _setup(policy_file, nested_csv)
    with pytest.raises(TargetUnreachable, match="best lower bound") as err:
        calibrate(loaded, "auto", rows, TopicPredictor(invert=True), target=0.99, resamples=200, grids=GRIDS)
    assert len(err.value.points) == sum(len(g) for g in GRIDS.values())  # the curve travels with the error


def test_the_same_data_twice_is_refused(nested_csv):
    from router.calibration import CalibrationError

    with pytest.raises(CalibrationError, match="given twice"):
        load_rows([nested_csv, nested_csv.parent / ".." / nested_csv.parent.name / nested_csv.name])


@pytest.mark.parametrize("file_first", [False, True])
def test_a_file_inside_a_folder_given_too_is_refused(tmp_path, file_first):
    """From a break-it pass: --data d --data d/x.csv counted x.csv's rows twice."""
    from router.calibration import CalibrationError
    from tests.calibrate.conftest import write_folder_of_two

    folder, inner = write_folder_of_two(tmp_path)
    paths = [inner, folder] if file_first else [folder, inner]
    with pytest.raises(CalibrationError, match="both hold .*x.csv; each row would count twice"):
        load_rows(paths)
    assert load_rows([folder]).n == 80 and load_rows([inner, folder / "y.csv"]).n == 80


def test_dropped_rows_are_counted(tmp_path):
    from tests.calibrate.conftest import write_nested

    path = write_nested(tmp_path / "n.csv", n=20)
    lines = path.read_text().splitlines()
    for i, value in ((1, "nan"), (2, "")):  # a NaN score, a missing score
        cells = lines[i].split(",")
        cells[3] = value
        lines[i] = ",".join(cells)
    path.write_text("\n".join(lines) + "\n")
    rows = load_rows([path])
    assert rows.n == 18 and rows.dropped == {"missing_score": 1, "nan": 1}


def test_a_route_with_one_model_has_nothing_to_calibrate(policy_file, nested_csv):
    """From a break-it pass: a one-backend route was 'calibrated' to min_quality 1.0."""
    from router.calibration import CalibrationError, route_columns
    from router.policy import parse_policy
    from tests.calibrate.conftest import POLICY

    rows = load_rows([nested_csv])
    one = parse_policy(POLICY.replace("backends: [small, large]", "backends: [large]"))
    with pytest.raises(CalibrationError, match="route 'other' has one backend \\(large\\): every request goes to it"):
        route_columns(one, "other", rows.models)
    same = parse_policy(POLICY.replace("model: small", "model: large"))
    with pytest.raises(CalibrationError, match="all stand for the data model 'large'"):
        route_columns(same, "other", rows.models)
    route, columns = route_columns(load_policy(policy_file), "auto", rows.models)
    assert route.name == "auto" and len(set(columns.values())) == 3


def test_a_single_evaluated_sweep_reports_shares_and_rejections():
    scores = np.array([[1.0, 1.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0]])
    costs = np.array([[1.0, 10.0]] * 4)
    sw = Sweep("target", np.array([0.9]), np.array([[0, 0, 1, -1]]))
    (p,) = evaluate(sw, scores, costs, 1, ["a", "b"], confidence=0.9, weights=resample_weights(4, 100, 0))
    assert p.ratio == pytest.approx(2 / 3) and p.cost_ratio == pytest.approx(12 / 40)
    assert p.miss_rate == pytest.approx(0.25) and p.rejected == 1
    assert p.share == {"a": 0.5, "b": 0.25}


def test_fixed_sequence_stops_at_the_first_miss_from_the_top():
    from router.calibration.bound import Point, pick

    def pt(t, lower, cost):
        return Point("target", t, 100, lower + 0.01, lower, (lower, 1.0), cost, 0.0, 0.95)

    points = [pt(0.5, 0.97, 0.1), pt(0.7, 0.90, 0.3), pt(0.9, 0.96, 0.6), pt(1.0, 0.99, 0.9)]
    assert pick(points, 0.95).threshold == 0.9  # 0.5 passes alone but lies behind a miss
    with pytest.raises(TargetUnreachable, match="fixed-sequence testing stops"):
        pick([pt(0.5, 0.97, 0.1), pt(1.0, 0.90, 0.9)], 0.95)


def test_split_rows_keeps_the_classifiers_split(data_dir):
    from gateway.commands.calibrate import split_rows
    from router.calibration import CalibrationError
    from router.classify.data import split_of

    rows = load_rows([data_dir / "routerbench" / "mbpp_train.csv"])
    calib = split_rows(rows, "calib")
    assert 0 < calib.n < rows.n and all(split_of(p) == "calib" for p in calib.prompts)
    with pytest.raises(CalibrationError, match="one of"):
        split_rows(rows, "dev")
