"""``mixroute calibrate`` with an empty path: typer reads ``''`` as ``Path('.')``, so
``--data ''`` silently calibrated on the current folder, ``--adapters ''`` loaded the heads
of the current folder, and ``--policy ''`` failed naming ``.``, a path the user never gave.
Each is refused with one line naming the flag and exit status 2, before any work (as
``mixroute replay --data ''``)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from gateway.cli import app
from tests.calibrate.conftest import TopicPredictor

runner = CliRunner()


@pytest.fixture(autouse=True)
def loaded(monkeypatch):
    """The ``adapters`` each heads load was given (fake heads)."""
    seen = []

    def load(adapters):
        seen.append(adapters)
        return TopicPredictor()

    monkeypatch.setattr("gateway.commands.calibrate._load_heads", load)
    return seen


@pytest.fixture
def in_data_folder(nested_csv, monkeypatch):
    """Run in the folder of ``nested_csv``: ``.`` there is valid outcome data, so an empty
    ``--data`` read as ``.`` would calibrate instead of failing."""
    monkeypatch.chdir(nested_csv.parent)
    return nested_csv


@pytest.mark.parametrize(("args", "line"), [
    (["--data", ""], "--data '': an empty path; give an outcome data file or folder (. for the current folder)"),
    (["--data", "nested.csv", "--data", ""],
     "--data '': an empty path; give an outcome data file or folder (. for the current folder)"),
    (["--data", "nested.csv", "--policy", ""],
     "--policy '': an empty path; give a policy file, or leave --policy out for the policy of the data"),
    (["--data", "nested.csv", "--policy", "", "--write"],
     "--policy '': an empty path; give a policy file, or leave --policy out for the policy of the data"),
    (["--data", "nested.csv", "--adapters", ""],
     "--adapters '': an empty path; give a heads folder (. for the current folder), or leave --adapters out for "
     "the shipped heads"),
], ids=["data", "data-second", "policy", "policy-write", "adapters"])
def test_an_empty_path_is_refused(in_data_folder, tmp_path, loaded, args, line):
    out = tmp_path / "out" / "r.json"
    res = runner.invoke(app, ["calibrate", *args, "--resamples", "100", "--json", str(out)])
    assert res.exit_code == 2, res.output
    assert res.stderr == f"error: {line}\n"
    assert res.stdout == ""
    assert loaded == [] and not out.exists()


def test_the_current_folder_is_still_read_when_named(in_data_folder, loaded):
    """``.`` spelled out is the current folder, as before."""
    res = runner.invoke(app, ["calibrate", "--data", ".", "--resamples", "100", "--target", "0.9"])
    assert res.exit_code == 0, res.output
    assert "300 calibration rows" in res.stdout  # nested.csv's rows
    assert loaded == [None]
