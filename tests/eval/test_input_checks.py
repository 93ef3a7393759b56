"""``mixroute eval`` input checks from a break-it pass: a ``--test`` (or ``--train``) path
given twice, also through a link or another spelling, evaluated it twice; a model named
twice in ``--prices`` silently kept one price; a blank cost cell was filled with the
model's mean cost although the docs say such rows are dropped."""

from __future__ import annotations

import json
import os

import pytest
from typer.testing import CliRunner

from gateway.cli import app

runner = CliRunner()


def _spellings(tiny_pair_csv):
    """The second spelling of ``tiny_pair_csv`` per kind of repetition."""
    folder = tiny_pair_csv.parent
    sym = folder / "sym.csv"
    sym.symlink_to(tiny_pair_csv)
    hard = folder / "hard.csv"
    os.link(tiny_pair_csv, hard)
    return {"same": tiny_pair_csv, "spelling": folder / ".." / folder.name / tiny_pair_csv.name,
            "symlink": sym, "hardlink": hard}


@pytest.mark.parametrize("kind", ["same", "spelling", "symlink", "hardlink"])
def test_a_test_file_given_twice_is_refused(tiny_pair_csv, tmp_path, kind):
    other = _spellings(tiny_pair_csv)[kind]
    res = runner.invoke(app, ["eval", "--test", str(tiny_pair_csv), "--test", str(other), "--router", "zero",
                              "--bootstrap", "0", "--json", str(tmp_path / "r.json")])
    assert res.exit_code == 2, res.output
    assert res.stderr == (f"error: --test {other}: the same file as --test {tiny_pair_csv} (given twice); it would "
                          "be evaluated twice: give it once\n")
    assert not (tmp_path / "r.json").exists()


def test_a_test_folder_given_twice_is_refused(tmp_path):
    from tests.eval.conftest import write_tiny

    folder = tmp_path / "d"
    folder.mkdir()
    write_tiny(folder / "a.csv", n=30, two_models=True)
    res = runner.invoke(app, ["eval", "--test", str(folder), "--test", f"{folder}/", "--router", "zero",
                              "--bootstrap", "0"])
    assert res.exit_code == 2 and "the same folder as --test" in res.stderr, res.output
    assert res.stderr.count("\n") == 1


def test_a_train_file_given_twice_is_refused(tiny_pair_csv, tmp_path):
    from tests.eval.conftest import write_tiny

    train = write_tiny(tmp_path / "train.csv", n=30, two_models=True, start=1000)
    hard = tmp_path / "train2.csv"
    os.link(train, hard)
    res = runner.invoke(app, ["eval", "--test", str(tiny_pair_csv), "--train", str(train), "--train", str(hard),
                              "--router", "zero", "--bootstrap", "0"])
    assert res.exit_code == 2, res.output
    assert f"error: --train {hard}: the same file as --train {train} (given twice)" in res.stderr


def test_different_test_files_still_run(tiny_pair_csv, tmp_path):
    """A copy is another file: two datasets (e.g. to compare), not refused."""
    copy = tmp_path / "copy.csv"
    copy.write_bytes(tiny_pair_csv.read_bytes())
    res = runner.invoke(app, ["eval", "--test", str(tiny_pair_csv), "--test", str(copy), "--router", "zero",
                              "--bootstrap", "0", "--json", str(tmp_path / "r.json")])
    assert res.exit_code == 0, res.output
    assert len(json.loads((tmp_path / "r.json").read_text())) == 2


@pytest.mark.parametrize("text", ["cheap: 0.1\ndear: 10\ncheap: 0.2\n", '{"cheap": 0.1, "dear": 10, "cheap": 0.2}'])
def test_a_model_priced_twice_is_warned_about(tmp_path, text):
    data = tmp_path / "pair.csv"
    data.write_text("prompt,cheap,dear\n" + "".join(f"q{i},{i % 2 == 0},True\n" for i in range(20)))
    prices = tmp_path / "prices.yaml"
    prices.write_text(text)
    res = runner.invoke(app, ["eval", "--test", str(data), "--router", "zero", "--bootstrap", "0",
                              "--prices", str(prices), "--json", str(tmp_path / "r.json")])
    assert res.exit_code == 0, res.output
    warnings = [line for line in res.stderr.splitlines() if line.strip()]
    assert warnings == [f"warning: --prices {prices}: 'cheap' is given 2 times (0.1, 0.2); the last price, 0.2, "
                        "is used"]
    points = json.loads((tmp_path / "r.json").read_text())[0]["points"]
    assert points[1]["cost"] == pytest.approx(50 * points[0]["cost"])  # 10 vs the last 0.2 USD per 1M tokens


def test_names_that_read_as_one_are_a_repetition(tmp_path):
    from router.eval.prices import read_prices

    prices = tmp_path / "prices.yaml"
    prices.write_text("1: 2\n'1': 3\nother: 1\n")
    lines: list[str] = []
    assert read_prices(prices, lines.append) == {"1": 3.0, "other": 1.0}
    assert lines == ["'1' is given 2 times (2, 3); the last price, 3, is used"]
    prices.write_text("base: 1\nother: 2\n")  # no repetition, no line
    assert read_prices(prices, lines.append) == {"base": 1.0, "other": 2.0} and len(lines) == 1


def test_a_blank_cost_cell_drops_its_row(tmp_path):
    """The docs (docs/EVALUATION.md) say rows with a missing cost are dropped and counted;
    the cell was filled with the model's mean cost instead."""
    from tests.eval.conftest import zero_router_report

    report = zero_router_report(tmp_path, "blank.csv", "prompt,eval_name,a,b,a|total_cost,b|total_cost\n"
                                "hi,x,1,0,0.1,\nyo,x,1,0,0.1,0.2\nho,x,0,1,0.1,0.4\n")
    assert "2 rows" in report and "1 missing_cost" in report


def test_data_without_any_cost_keeps_its_rows(tmp_path):
    from router.eval.data import load_eval_data

    f = tmp_path / "no_costs.csv"
    f.write_text("prompt,cheap,dear\n" + "".join(f"q{i},{i % 2 == 0},True\n" for i in range(20)))
    data = load_eval_data(f)
    assert data.n == 20 and data.dropped == {} and data.price_source == "price_list"
