"""``mixroute eval``: an output (``--json``, ``--report``, ``--plot``) that is one of the
input files is refused before the evaluation, and the input is left as it was (from a
break-it pass: ``--test g.csv --json g.csv`` replaced the data with the results, exit 0)."""

from __future__ import annotations

import os
import shutil

import pytest
from typer.testing import CliRunner

from gateway.cli import app

runner = CliRunner()


@pytest.mark.parametrize("flag", ["--json", "--report", "--plot"])
def test_an_output_over_the_test_file_is_refused(tiny_pair_csv, flag):
    before = tiny_pair_csv.read_bytes()
    res = runner.invoke(app, ["eval", "--test", str(tiny_pair_csv), "--router", "zero", flag, str(tiny_pair_csv)])
    assert res.exit_code == 2, res.output
    assert f"{flag} {tiny_pair_csv}: is an input file of this command (--test {tiny_pair_csv})" in res.output
    assert tiny_pair_csv.read_bytes() == before


def test_a_file_inside_a_test_folder_a_hard_link_and_other_inputs_are_refused(tiny_pair_csv, tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    inside = folder / "pair.csv"
    shutil.copy(tiny_pair_csv, inside)
    res = runner.invoke(app, ["eval", "--test", str(folder), "--router", "zero", "--json", str(inside)])
    assert res.exit_code == 2 and f"(--test {inside})" in res.output, res.output
    link = tmp_path / "link.csv"
    os.link(tiny_pair_csv, link)
    res = runner.invoke(app, ["eval", "--test", str(tiny_pair_csv), "--router", "zero", "--report", str(link)])
    assert res.exit_code == 2 and "is an input file" in res.output, res.output
    res = runner.invoke(app, ["eval", "--test", str(inside), "--train", str(tiny_pair_csv), "--router", "zero",
                              "--json", str(tiny_pair_csv)])
    assert res.exit_code == 2 and f"(--train {tiny_pair_csv})" in res.output, res.output
    exclude = tmp_path / "exclude.jsonl"
    exclude.write_text('{"prompt": "x"}\n')
    res = runner.invoke(app, ["eval", "--test", str(inside), "--exclude", str(exclude), "--router", "zero",
                              "--json", str(exclude)])
    assert res.exit_code == 2 and f"(--exclude {exclude})" in res.output, res.output
    assert inside.read_bytes() == tiny_pair_csv.read_bytes() and exclude.read_text() == '{"prompt": "x"}\n'


def test_an_output_next_to_the_data_is_written(tiny_pair_csv, tmp_path):
    out = tmp_path / "r.json"
    res = runner.invoke(app, ["eval", "--test", str(tiny_pair_csv), "--router", "zero", "--json", str(out)])
    assert res.exit_code == 0, res.output
    assert out.stat().st_size > 0
