"""``mixroute calibrate`` end to end with a fake predictor, and the in-place policy edit."""

from __future__ import annotations

import pytest
import yaml
from typer.testing import CliRunner

from gateway.cli import app
from router.calibration.errors import CalibrationError
from router.calibration.write import edit_text
from router.policy import load_policy, parse_policy
from tests.calibrate.conftest import POLICY, TopicPredictor

runner = CliRunner()
BAR = {"min_quality": 0.6, "calibrated": {"ratio_target": 0.95, "confidence": 0.9, "ratio": 0.97,
                                          "ratio_lower_bound": 0.955, "cost_ratio": 0.4, "miss_rate": 0.03,
                                          "n": 300, "method": "test", "date": "2026-11-30", "data": ["x.csv"]}}


@pytest.fixture
def fake_heads(monkeypatch):
    from tests.calibrate.test_calibrate import GRIDS

    monkeypatch.setattr("gateway.commands.calibrate._load_heads", lambda adapters: TopicPredictor())
    monkeypatch.setattr("router.calibration.GRIDS", GRIDS)  # a coarse sweep keeps the tests fast


def test_edit_replaces_only_the_routes_bar():
    new = edit_text(POLICY, "auto", BAR)
    loaded = parse_policy(new)
    bar = loaded.policy.route("auto").quality_bar
    assert bar.min_quality == 0.6 and bar.target is None and bar.calibrated.n == 300
    assert loaded.policy.route("other").quality_bar.target == 0.95  # the default, untouched
    old_lines = [ln for ln in POLICY.splitlines() if "quality_bar" not in ln and "target: 0.95" not in ln]
    assert [ln for ln in new.splitlines() if ln in old_lines] == old_lines  # every other line kept, in order
    assert edit_text(new, "auto", BAR) == new  # idempotent


def test_edit_adds_a_bar_to_a_route_without_one_and_handles_flow_and_first_key():
    new = edit_text(POLICY, "other", BAR)
    assert parse_policy(new).policy.route("other").quality_bar.min_quality == 0.6
    first_key = POLICY.replace("  - name: auto\n    backends: [small, medium, large]\n    quality_bar:\n"
                               "      target: 0.95   # uncalibrated\n",
                               "  - quality_bar: {target: 0.9}\n    name: auto\n    backends: [small, medium, large]\n")
    assert "- quality_bar: {target: 0.9}" in first_key
    got = parse_policy(edit_text(first_key, "auto", BAR)).policy.route("auto").quality_bar
    assert got.min_quality == 0.6
    with pytest.raises(CalibrationError, match="no route 'nope'"):
        edit_text(POLICY, "nope", BAR)
    flow = POLICY.replace("  - name: other\n    backends: [small, large]\n", "  - {name: other, backends: [small]}\n")
    with pytest.raises(CalibrationError, match="flow style"):
        edit_text(flow, "other", BAR)


def test_write_round_trips_through_policy_validate(policy_file, nested_csv, fake_heads):
    args = ["calibrate", "--data", str(nested_csv), "--policy", str(policy_file), "--resamples", "500"]
    res = runner.invoke(app, [*args, "--write"])
    assert res.exit_code == 0, res.output
    assert "chosen" in res.output and "wrote routes[auto].quality_bar" in res.output
    text = policy_file.read_text()
    assert "# a test policy; this comment must survive --write" in text and "# the cheap one" in text
    ok = runner.invoke(app, ["policy", "validate", str(policy_file)])
    assert ok.exit_code == 0, ok.output
    bar = load_policy(policy_file).policy.route("auto").quality_bar
    assert bar.calibrated.ratio_target == 0.95 and bar.calibrated.ratio_lower_bound >= 0.95
    assert bar.calibrated.n == 300 and bar.calibrated.data == [str(nested_csv)]
    # calibrating again replaces the block (the current bar is now the calibrated one)
    again = runner.invoke(app, [*args, "--write", "--target", "0.9"])
    assert again.exit_code == 0, again.output
    assert load_policy(policy_file).policy.route("auto").quality_bar.calibrated.ratio_target == 0.9


def test_without_write_the_snippet_is_printed_and_the_file_kept(policy_file, nested_csv, fake_heads, tmp_path):
    before = policy_file.read_text()
    res = runner.invoke(app, ["calibrate", "--data", str(nested_csv), "--policy", str(policy_file),
                              "--resamples", "200", "--json", str(tmp_path / "c.json")])
    assert res.exit_code == 0, res.output
    snippet = res.output.split("# routes[auto] of the policy:\n", 1)[1]
    assert "calibrated" in yaml.safe_load(snippet)["quality_bar"]
    assert policy_file.read_text() == before and (tmp_path / "c.json").stat().st_size > 1000


def test_bad_input_exits_2_and_unreachable_exits_1(policy_file, nested_csv, fake_heads, tmp_path, monkeypatch):
    res = runner.invoke(app, ["calibrate", "--data", str(nested_csv), "--write"])
    assert res.exit_code == 2 and "--write needs --policy" in res.output
    other = tmp_path / "p.yaml"
    other.write_text(POLICY.replace("model: large", "model: huge"))
    res = runner.invoke(app, ["calibrate", "--data", str(nested_csv), "--policy", str(other)])
    assert res.exit_code == 2 and "large (huge)" in res.output
    res = runner.invoke(app, ["calibrate", "--data", str(nested_csv), "--policy", str(policy_file), "--route", "x"])
    assert res.exit_code == 2 and "no route 'x'" in res.output
    monkeypatch.setattr("gateway.commands.calibrate._load_heads", lambda adapters: TopicPredictor(invert=True))
    res = runner.invoke(app, ["calibrate", "--data", str(nested_csv), "--target", "0.99", "--resamples", "200",
                              "--json", str(tmp_path / "curve.json")])
    assert res.exit_code == 1 and "best lower bound" in res.output
    import json

    doc = json.loads((tmp_path / "curve.json").read_text())  # the curve that missed is kept
    assert doc["chosen"] is None and "best lower bound" in doc["error"] and len(doc["points"]) > 10


def test_route_target_keeps_its_window():
    """A route_target bar is swept, checked and written with the route's window."""
    from router.calibration import Calibration, evidence_bar
    from router.calibration.bound import Point
    from router.calibration.simulate import bar_of

    assert bar_of("route_target", 0.97, 16).window == 16
    assert bar_of("target", 0.97, 16).window is None  # only route_target takes a window
    point = Point("route_target", 0.97, 100, 0.96, 0.95, (0.94, 0.98), 0.3, 0.1, 0.975)
    cal = Calibration("auto", "big", point, [point], point, 0.9, "m", window=16)
    bar = evidence_bar(cal, 0.95, ["d"])
    assert bar["route_target"] == 0.97 and bar["window"] == 16 and bar["calibrated"]["ratio_lower_bound"] == 0.95
    cal.window = None
    assert "window" not in evidence_bar(cal, 0.95, ["d"])


def test_write_on_too_few_rows_writes_nothing(policy_file, fake_heads, tmp_path):
    """From a break-it pass: one calibration row was written into the policy as a bar
    "certified" at 90% confidence."""
    from tests.calibrate.conftest import write_nested

    before = policy_file.read_text()
    small = write_nested(tmp_path / "small.csv", n=20, noise=0.0)
    res = runner.invoke(app, ["calibrate", "--data", str(small), "--policy", str(policy_file),
                              "--resamples", "200", "--target", "0.8", "--write"])
    assert res.exit_code == 2, res.output
    assert "not written: 20 calibration rows cannot certify a bar (at least 30)" in res.output
    assert "# routes[auto] of the policy:" in res.output and policy_file.read_text() == before


def test_a_policy_that_cannot_be_written_is_one_line(policy_file, nested_csv, fake_heads, monkeypatch):
    """From a break-it pass: an immutable policy file gave a PermissionError traceback and exit
    1 (the code of an unreachable target). The failure is simulated at os.replace: this
    machine's tests run as root, which no file mode stops."""
    def refuse(src, dst):
        raise PermissionError(1, "Operation not permitted")

    before = policy_file.read_text()
    monkeypatch.setattr("router.calibration.write.os.replace", refuse)
    res = runner.invoke(app, ["calibrate", "--data", str(nested_csv), "--policy", str(policy_file),
                              "--resamples", "200", "--write"])
    assert res.exit_code == 2 and "cannot write: Operation not permitted; the policy is unchanged" in res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)
    assert policy_file.read_text() == before
    assert [p.name for p in policy_file.parent.iterdir() if p.name.startswith(".policy.yaml.")] == []


def test_dropped_rows_and_a_one_backend_route_are_reported(policy_file, nested_csv, fake_heads, tmp_path,
                                                            monkeypatch):
    """From a break-it pass: rows with a missing or NaN score were dropped silently, and a
    route with one backend was given a bar (min_quality 1.0)."""
    from tests.calibrate.conftest import write_nested

    damaged = write_nested(tmp_path / "damaged.csv", n=60, seed=3)
    lines = damaged.read_text().splitlines()
    for i, value in ((1, "nan"), (2, ""), (3, "")):
        cells = lines[i].split(",")
        cells[4] = value
        lines[i] = ",".join(cells)
    damaged.write_text("\n".join(lines) + "\n")
    res = runner.invoke(app, ["calibrate", "--data", str(nested_csv), "--data", str(damaged),
                              "--policy", str(policy_file), "--resamples", "200"])
    assert res.exit_code == 0, res.output
    assert f"{damaged}: 57 rows, dropped: 2 missing_score, 1 nan" in res.stderr
    assert str(nested_csv) not in res.stderr  # nothing dropped there: no line
    assert "357 calibration rows" in res.output

    def no_heads(adapters):
        raise AssertionError("the heads must not load for a route with nothing to calibrate")

    monkeypatch.setattr("gateway.commands.calibrate._load_heads", no_heads)
    one = tmp_path / "one.yaml"
    one.write_text(POLICY.replace("backends: [small, large]", "backends: [large]"))
    before = one.read_text()
    res = runner.invoke(app, ["calibrate", "--data", str(nested_csv), "--policy", str(one), "--route", "other",
                              "--write"])
    assert res.exit_code == 2, res.output
    assert res.stderr == ("mixroute calibrate: route 'other' has one backend (large): every request goes to it, so "
                          "there is nothing to calibrate (a quality bar chooses between backends)\n")
    assert one.read_text() == before


def test_a_file_inside_a_folder_given_too_is_one_line(tmp_path, fake_heads):
    from tests.calibrate.conftest import write_nested

    folder = tmp_path / "d"
    folder.mkdir()
    inner = write_nested(folder / "x.csv", n=40)
    res = runner.invoke(app, ["calibrate", "--data", str(folder), "--data", str(inner)])
    assert res.exit_code == 2 and res.stderr.count("\n") == 1, res.output
    assert f"{folder} and {inner} both hold {inner}; each row would count twice" in res.stderr
