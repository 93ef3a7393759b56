"""``mixroute calibrate``: a ``--json`` that is one of the input files (a data file, one
inside a ``--data`` folder, the ``--policy`` being written by ``--write``) is refused
before any work, and the file is left as it was (from a break-it pass: ``--json`` replaced
the data with the curve, and ``--write --json p.yaml`` wrote JSON over the policy, then
failed)."""

from __future__ import annotations

import shutil

import pytest
from typer.testing import CliRunner

from gateway.cli import app
from tests.calibrate.conftest import TopicPredictor

runner = CliRunner()


@pytest.fixture(autouse=True)
def fake_heads(monkeypatch):
    monkeypatch.setattr("gateway.commands.calibrate._load_heads", lambda adapters: TopicPredictor())


def test_json_over_the_data_file_is_refused(nested_csv):
    before = nested_csv.read_bytes()
    res = runner.invoke(app, ["calibrate", "--data", str(nested_csv), "--resamples", "100", "--json", str(nested_csv)])
    assert res.exit_code == 2, res.output
    assert f"--json {nested_csv}: is an input file of this command (--data {nested_csv})" in res.output
    assert res.output.count("\n") == 1 and nested_csv.read_bytes() == before


def test_json_over_a_file_inside_a_data_folder_is_refused(nested_csv, tmp_path):
    folder = tmp_path / "d"
    folder.mkdir()
    inside = shutil.copy(nested_csv, folder / "n.csv")
    before = inside.read_bytes()
    res = runner.invoke(app, ["calibrate", "--data", str(folder), "--resamples", "100", "--json", str(inside)])
    assert res.exit_code == 2 and f"(--data {inside})" in res.output, res.output
    assert inside.read_bytes() == before


@pytest.mark.parametrize("write", [True, False])
def test_json_over_the_policy_is_refused(nested_csv, policy_file, write):
    before = policy_file.read_bytes()
    res = runner.invoke(app, ["calibrate", "--data", str(nested_csv), "--policy", str(policy_file), "--resamples",
                              "100", *(["--write"] if write else []), "--json", str(policy_file)])
    assert res.exit_code == 2, res.output
    assert f"--json {policy_file}: is an input file of this command (--policy {policy_file})" in res.output
    assert policy_file.read_bytes() == before
