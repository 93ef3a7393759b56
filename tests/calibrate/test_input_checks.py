"""``mixroute calibrate`` input checks from a break-it pass: ``--data`` given twice through a
hard link (or a hard link of a file inside a ``--data`` folder) counted its rows twice, and
a blank cost cell was filled with the model's mean cost although the docs say rows with a
missing cost are dropped."""

from __future__ import annotations

import os

import pytest
from typer.testing import CliRunner

from gateway.cli import app
from tests.calibrate.conftest import TopicPredictor, write_folder_of_two, write_nested

runner = CliRunner()


@pytest.fixture(autouse=True)
def fake_heads(monkeypatch):
    monkeypatch.setattr("gateway.commands.calibrate._load_heads", lambda adapters: TopicPredictor())


@pytest.mark.parametrize("kind", ["same", "spelling", "symlink", "hardlink"])
def test_the_same_data_twice_is_refused_by_the_command(nested_csv, kind):
    folder = nested_csv.parent
    if kind == "symlink":
        other = folder / "sym.csv"
        other.symlink_to(nested_csv)
    elif kind == "hardlink":
        other = folder / "hard.csv"
        os.link(nested_csv, other)
    else:
        other = nested_csv if kind == "same" else folder / ".." / folder.name / nested_csv.name
    res = runner.invoke(app, ["calibrate", "--data", str(nested_csv), "--data", str(other), "--resamples", "100"])
    assert res.exit_code == 2, res.output
    assert res.stderr == (f"error: --data {other}: the same file as --data {nested_csv} (given twice); its rows "
                          "would count twice: give it once\n")


def test_a_hard_link_given_twice_is_refused_by_load_rows(nested_csv):
    from router.calibration import CalibrationError, load_rows

    hard = nested_csv.parent / "hard.csv"
    os.link(nested_csv, hard)
    with pytest.raises(CalibrationError, match=f"{hard}: given twice \\(as {nested_csv}\\)"):
        load_rows([nested_csv, hard])


@pytest.mark.parametrize("file_first", [False, True])
def test_a_hard_link_of_a_file_inside_a_folder_is_refused(tmp_path, file_first):
    from router.calibration import CalibrationError, load_rows

    folder, inner = write_folder_of_two(tmp_path)
    hard = tmp_path / "elsewhere.csv"
    os.link(inner, hard)
    paths = [hard, folder] if file_first else [folder, hard]
    with pytest.raises(CalibrationError, match="both hold .*; each row would count twice") as err:
        load_rows(paths)
    assert "x.csv" in str(err.value) and "elsewhere.csv" in str(err.value)
    res = runner.invoke(app, ["calibrate", *(a for p in paths for a in ("--data", str(p))), "--resamples", "100"])
    assert res.exit_code == 2 and "each row would count twice" in res.stderr, res.output


def _blank_cost(path, rows=(1, 2)):
    """Blank the ``small|total_cost`` cell of ``rows`` (1-based data lines) of ``path``."""
    lines = path.read_text().splitlines()
    for i in rows:
        cells = lines[i].split(",")
        cells[-3] = ""
        lines[i] = ",".join(cells)
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_blank_cost_cell_drops_its_row(tmp_path):
    from router.calibration import load_rows

    path = _blank_cost(write_nested(tmp_path / "n.csv", n=20))
    rows = load_rows([path])
    assert rows.n == 18 and rows.dropped == {"missing_cost": 2}
    assert (rows.costs[:, 0] == 0.001).all()  # no filled-in cost: every kept cell is a recorded one


def test_dropped_blank_costs_are_reported_per_data_path(tmp_path):
    blank = _blank_cost(write_nested(tmp_path / "blank.csv", n=60), rows=(3,))
    whole = write_nested(tmp_path / "whole.csv", n=60, seed=1)
    res = runner.invoke(app, ["calibrate", "--data", str(blank), "--data", str(whole), "--resamples", "100"])
    assert res.exit_code in (0, 1), res.output
    said = [line for line in res.stderr.splitlines() if "dropped" in line]
    assert said == [f"mixroute calibrate: {blank}: 59 rows, dropped: 1 missing_cost"]


@pytest.mark.parametrize("value", ["2", "half", "", "nan", "-0.1"])
def test_a_bad_smoothing_setting_is_named_not_blamed_on_the_heads(nested_csv, monkeypatch, value):
    """From a fresh-user pass: a bad ``MIXROUTE_CLASSIFIER_MEMORY_SMOOTHING`` said "no usable
    heads", and an empty one was taken as unset where the gateway refuses it."""
    monkeypatch.setenv("MIXROUTE_CLASSIFIER_MEMORY_SMOOTHING", value)
    res = runner.invoke(app, ["calibrate", "--data", str(nested_csv), "--resamples", "100"])
    assert res.exit_code == 2, res.output
    assert res.stderr == (f"mixroute calibrate: invalid setting MIXROUTE_CLASSIFIER_MEMORY_SMOOTHING={value!r}: a "
                          "number in [0, 1], or unset for the outcome memory's own\n")


def test_the_smoothing_setting_reads_as_the_gateway_reads_it(monkeypatch):
    from router.classify.memory import settings_from_env

    monkeypatch.delenv("MIXROUTE_CLASSIFIER_MEMORY_SMOOTHING", raising=False)
    monkeypatch.delenv("MIXROUTE_CLASSIFIER_MEMORY", raising=False)
    assert settings_from_env() == (True, None)
    for text, value in ((" 0.5", 0.5), ("1", 1.0), ("0", 0.0)):
        monkeypatch.setenv("MIXROUTE_CLASSIFIER_MEMORY_SMOOTHING", text)
        assert settings_from_env() == (True, value)
    monkeypatch.setenv("MIXROUTE_CLASSIFIER_MEMORY", "off")
    assert settings_from_env()[0] is False
