"""``mixroute eval`` with an empty path: typer reads ``''`` as ``Path('.')``, so ``--test ''``
(``--train ''``, ``--adapters ''``) silently read the current folder, and ``--exclude ''``
(``--prices ''``) failed naming ``.``, a path the user never gave. Each is refused with one
line naming the flag and exit status 2, before any work (as ``mixroute replay --data ''``)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from gateway.cli import app

runner = CliRunner()

DATA = "an outcome data file or folder (. for the current folder)"


@pytest.fixture
def in_data_folder(tiny_pair_csv, monkeypatch):
    """Run in the folder of ``tiny_pair_csv``: ``.`` there is valid outcome data, so an empty
    path read as ``.`` would run instead of failing."""
    monkeypatch.chdir(tiny_pair_csv.parent)
    return tiny_pair_csv


@pytest.mark.parametrize(("args", "line"), [
    (["--test", ""], f"--test '': an empty path; give {DATA}"),
    (["--test", "pair.csv", "--test", ""], f"--test '': an empty path; give {DATA}"),
    (["--test", "pair.csv", "--train", ""], f"--train '': an empty path; give {DATA}"),
    (["--test", "pair.csv", "--exclude", ""], "--exclude '': an empty path; give a JSON lines file of prompts to drop"),
    (["--test", "pair.csv", "--prices", ""],
     "--prices '': an empty path; give a YAML or JSON price file, or leave --prices out for the replay price list"),
    (["--test", "pair.csv", "--adapters", ""],
     "--adapters '': an empty path; give a heads folder (. for the current folder), or leave --adapters out for "
     "the shipped heads"),
], ids=["test", "test-second", "train", "exclude", "prices", "adapters"])
def test_an_empty_path_is_refused(in_data_folder, tmp_path, args, line):
    out = tmp_path / "out" / "r.json"
    res = runner.invoke(app, ["eval", *args, "--router", "zero", "--bootstrap", "0", "--json", str(out)])
    assert res.exit_code == 2, res.output
    assert res.stderr == f"error: {line}\n"
    assert res.stdout == ""
    assert not out.exists()


def test_the_current_folder_is_still_read_when_named(in_data_folder, tmp_path):
    """``.`` spelled out is the current folder, as before."""
    res = runner.invoke(app, ["eval", "--test", ".", "--router", "zero", "--bootstrap", "0",
                              "--json", str(tmp_path / "out" / "r.json")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "out" / "r.json").exists()
