"""``mixroute eval`` end to end: outputs, and bad input named by file and problem."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from gateway.cli import app

runner = CliRunner()
KEYS = {"dataset", "router", "aiq", "apgr", "cpt50", "cpt80", "quality", "cost"}


def test_eval_writes_json_report_and_plot(tiny_pair_csv, tmp_path):
    out = tmp_path / "out"
    res = runner.invoke(app, ["eval", "--test", str(tiny_pair_csv), "--router", "zero", "--router", "random",
                              "--router", "oracle", "--router", "knn", "--embedder", "hashing", "--bootstrap", "30",
                              "--json", str(out / "r.json"), "--report", str(out / "r.md"),
                              "--plot", str(out / "r.png")])
    assert res.exit_code == 0, res.output
    rows = json.loads((out / "r.json").read_text())
    assert [r["router"] for r in rows] == ["zero", "random", "oracle", "knn"]
    assert all(KEYS <= set(r) for r in rows)
    zero = rows[0]
    assert zero["apgr"] == pytest.approx(0.5) and zero["cpt50"] == pytest.approx(0.5)
    assert "apgr" in rows[1]["ci"]
    assert (out / "r.png").stat().st_size > 1000
    md = (out / "r.md").read_text()
    assert "| zero |" in md and "mixroute eval" in md
    assert "zero" in res.output


def test_folder_is_one_dataset_and_exclude_drops_prompts(tmp_path):
    from tests.eval.conftest import write_tiny

    folder = tmp_path / "mixed"
    folder.mkdir()
    write_tiny(folder / "a.csv", n=30, seed=1)
    write_tiny(folder / "b.csv", n=30, seed=2)
    excl = tmp_path / "exclude.jsonl"
    excl.write_text(json.dumps({"eval_prompt": "please write a greeting number 0 about cats"}) + "\n"
                    + json.dumps({"prompt": "please write a poem number 1 about stars"}) + "\n")
    res = runner.invoke(app, ["eval", "--test", str(folder), "--router", "zero", "--bootstrap", "0",
                              "--exclude", str(excl), "--json", str(tmp_path / "r.json")])
    assert res.exit_code == 0, res.output
    rows = json.loads((tmp_path / "r.json").read_text())
    assert len(rows) == 1 and rows[0]["dataset"] == "mixed"
    assert 56 <= rows[0]["n"] <= 59  # 60 rows minus the excluded prompts that occur


@pytest.mark.parametrize("content, problem", [
    ("a,b\n1,2\n", "no known format"),
    ("prompt,m1,m2\nhi,True,\nyo,False,\n", "model column 'm2' has no scores"),
    ("prompt,m1\nhi,True\n", "single-model dataset"),
    ("prompt,eval_name,a,b,a|total_cost,b|total_cost\nhi,x,nan,1,0.1,0.2\n", "no rows left to evaluate (1 nan)"),
])
def test_bad_input_names_the_file_and_the_problem(tmp_path, content, problem):
    bad = tmp_path / "bad.csv"
    bad.write_text(content)
    res = runner.invoke(app, ["eval", "--test", str(bad), "--router", "zero"])
    assert res.exit_code == 2
    assert str(bad) in res.output and problem in res.output


def test_nan_rows_are_dropped_and_counted(tmp_path):
    from tests.eval.conftest import zero_router_report

    report = zero_router_report(tmp_path, "some_nan.csv", "prompt,eval_name,a,b,a|total_cost,b|total_cost\n"
                                "hi,x,nan,1,0.1,0.2\nyo,x,1,0,0.1,0.2\nho,x,0,1,0.1,0.2\n")
    assert "2 rows" in report and "1 nan" in report


def test_unknown_router_is_refused(tiny_csv):
    res = runner.invoke(app, ["eval", "--test", str(tiny_csv), "--router", "gpt5"])
    assert res.exit_code == 2 and "unknown router 'gpt5'" in res.output


def test_folder_of_dataset_folders_is_one_dataset(tmp_path):
    from tests.eval.conftest import write_tiny

    root = tmp_path / "traffic"
    for name, seed in (("a", 1), ("b", 2)):
        (root / name).mkdir(parents=True)
        write_tiny(root / name / f"{name}.csv", n=12, seed=seed)
    (root / "empty").mkdir()
    (root / "empty" / "contaminated_prompts.jsonl").write_text("")
    res = runner.invoke(app, ["eval", "--test", str(root), "--router", "zero", "--bootstrap", "0",
                              "--json", str(tmp_path / "r.json")])
    assert res.exit_code == 0, res.output
    rows = json.loads((tmp_path / "r.json").read_text())
    assert rows[0]["dataset"] == "traffic" and rows[0]["n"] == 24
    write_tiny(root / "c.csv", n=6, two_models=True)  # now the folder has a file of its own: loaded alone
    (root / "c.csv").rename(root / "a" / "c.csv")
    res = runner.invoke(app, ["eval", "--test", str(root), "--router", "zero"])
    assert res.exit_code == 2 and "model" in res.output


def test_holdout_keeps_only_the_classifiers_held_out_prompts(tiny_csv, tmp_path):
    from router.classify.data import split_of
    from router.eval.data import load_eval_data

    expected = sum(split_of(p) == "test" for p in load_eval_data(tiny_csv).prompts)
    res = runner.invoke(app, ["eval", "--test", str(tiny_csv), "--router", "zero", "--holdout", "--bootstrap", "0",
                              "--json", str(tmp_path / "r.json")])
    if expected == 0:
        assert res.exit_code == 2 and "held-out" in res.output
    else:
        assert res.exit_code == 0, res.output
        assert json.loads((tmp_path / "r.json").read_text())[0]["n"] == expected


def test_two_model_points_carry_share_and_pgr(tiny_pair_csv, tmp_path):
    res = runner.invoke(app, ["eval", "--test", str(tiny_pair_csv), "--router", "zero", "--bootstrap", "0",
                              "--json", str(tmp_path / "r.json")])
    assert res.exit_code == 0, res.output
    points = json.loads((tmp_path / "r.json").read_text())[0]["points"]
    assert [p["share"] for p in points] == [0.0, 1.0]
    assert [p["pgr"] for p in points] == [0.0, 1.0]


def test_a_log_export_is_pointed_to_what_if(tmp_path):
    log = tmp_path / "export.jsonl"
    log.write_text(json.dumps({"request_id": "r1", "route": "auto", "chosen": "small", "candidates": []}) + "\n")
    res = runner.invoke(app, ["eval", "--test", str(log), "--router", "zero"])
    assert res.exit_code == 2 and "mixroute log export" in res.output and "policy what-if" in res.output


def test_mt_bench_folder(data_dir, tmp_path):
    res = runner.invoke(app, ["eval", "--test", str(data_dir / "formats" / "mt_bench_example"), "--router", "zero",
                              "--bootstrap", "0", "--json", str(tmp_path / "r.json")])
    assert res.exit_code == 0, res.output
    row = json.loads((tmp_path / "r.json").read_text())[0]
    assert row["dataset"] == "mt_bench_example" and row["n"] == 2 and row["apgr"] == 0.5


def test_prices_file_reprices_data_without_costs(tmp_path):
    data = tmp_path / "pair.csv"
    data.write_text("prompt,cheap,dear\n" + "".join(f"q{i},{i % 2 == 0},True\n" for i in range(20)))
    prices = tmp_path / "prices.yaml"
    prices.write_text("cheap: 0.1\ndear: 10\n")
    res = runner.invoke(app, ["eval", "--test", str(data), "--router", "zero", "--bootstrap", "0",
                              "--prices", str(prices), "--json", str(tmp_path / "r.json")])
    assert res.exit_code == 0, res.output
    points = json.loads((tmp_path / "r.json").read_text())[0]["points"]
    assert points[1]["cost"] == pytest.approx(100 * points[0]["cost"])  # 10 vs 0.1 USD per 1M tokens
    prices.write_text("cheap: free\n")
    res = runner.invoke(app, ["eval", "--test", str(data), "--router", "zero", "--prices", str(prices)])
    assert res.exit_code == 2 and "price of 'cheap'" in res.output and str(prices) in res.output


def test_prices_that_price_nothing_are_warned_about(tmp_path, tiny_pair_csv):
    """From a break-it pass: --prices entries matching no model of the data were ignored silently."""
    data = tmp_path / "no_costs.csv"
    data.write_text("prompt,cheap-model,dear\n" + "".join(f"q{i},{i % 2 == 0},True\n" for i in range(20)))
    prices = tmp_path / "prices.yaml"
    prices.write_text("cheapmodel: 0.1\ndear: 10\nxyzzy: 1\n")
    res = runner.invoke(app, ["eval", "--test", str(data), "--router", "zero", "--bootstrap", "0",
                              "--prices", str(prices)])
    assert res.exit_code == 0, res.output
    warnings = [line for line in res.stderr.splitlines() if line.strip()]
    assert warnings == [
        f"warning: --prices {prices}: 'cheapmodel' matches no model in the data, so it is not used; did you mean "
        "'cheap-model'?",
        f"warning: --prices {prices}: 'xyzzy' matches no model in the data, so it is not used; its models: "
        "cheap-model, dear"]
    # data that records its costs keeps them: an entry for one of its models prices nothing either
    prices.write_text("small: 1\n")
    res = runner.invoke(app, ["eval", "--test", str(tiny_pair_csv), "--router", "zero", "--bootstrap", "0",
                              "--prices", str(prices)])
    assert res.exit_code == 0 and "'small' is not used: the data with this model records its costs" in res.stderr


def test_a_router_named_twice_runs_once(tiny_pair_csv, tmp_path):
    res = runner.invoke(app, ["eval", "--test", str(tiny_pair_csv), "--router", "zero", "--router", "oracle",
                              "--router", "zero", "--bootstrap", "0", "--json", str(tmp_path / "r.json")])
    assert res.exit_code == 0, res.output
    assert [r["router"] for r in json.loads((tmp_path / "r.json").read_text())] == ["zero", "oracle"]
    assert "note: router zero given more than once: run once" in res.stderr


def test_unwritable_outputs_and_bad_bytes_are_one_line_errors(tiny_pair_csv, tmp_path):
    """Checked before the run (a long evaluation is not thrown away by a typo in --json);
    a small non-UTF-8 file is named, not a traceback."""
    for flag, target in (("--json", tmp_path), ("--report", tiny_pair_csv / "r.md"), ("--plot", tmp_path)):
        res = runner.invoke(app, ["eval", "--test", str(tiny_pair_csv), "--router", "zero", "--bootstrap", "0",
                                  flag, str(target)])
        assert res.exit_code == 2 and flag in res.output and "Traceback" not in res.output, res.output
    res = runner.invoke(app, ["eval", "--test", str(tiny_pair_csv), "--router", "zero", "--bootstrap", "-5"])
    assert res.exit_code == 2 and "--bootstrap" in res.output
    latin1 = tmp_path / "latin1.csv"
    latin1.write_bytes(b'prompt,a,b\n"x\xe9",True,False\n"y",False,True\n')
    res = runner.invoke(app, ["eval", "--test", str(latin1), "--router", "zero", "--bootstrap", "0"])
    assert res.exit_code == 2 and "not UTF-8" in res.output and "latin1.csv" in res.output


def test_a_named_router_that_cannot_run_fails_the_command(tiny_pair_csv, tmp_path):
    empty = tmp_path / "no-heads"
    empty.mkdir()
    res = runner.invoke(app, ["eval", "--test", str(tiny_pair_csv), "--router", "mixroute", "--router", "zero",
                              "--adapters", str(empty), "--bootstrap", "0", "--json", str(tmp_path / "r.json")])
    assert res.exit_code == 1, res.output
    assert "could not run mixroute" in res.output
    rows = json.loads((tmp_path / "r.json").read_text())  # the results are still written
    assert {r["router"] for r in rows} == {"mixroute", "zero"}


def test_a_note_with_brackets_is_printed_as_text(capsys, monkeypatch):
    """From a fresh-user pass: rich read the install hint's "[classifier]" as a style tag and
    the table showed "pip install 'mixroute'"."""
    from types import SimpleNamespace

    from gateway.commands.eval import _table
    from router.eval import report

    monkeypatch.setattr(report, "describe", lambda rep: "")
    result = SimpleNamespace(router="knn", values={}, fit="",
                             note="torch is not installed: pip install 'mixroute[classifier]'")
    _table([SimpleNamespace(data=SimpleNamespace(name="tiny"), results=[result])])
    assert "mixroute[classifier]" in capsys.readouterr().out


def test_a_plot_format_matplotlib_cannot_write_is_refused_before_the_run(tiny_pair_csv, tmp_path):
    """From a fresh-user pass: `--plot out.txt` ran the whole evaluation, then failed with
    matplotlib's ValueError traceback."""
    res = runner.invoke(app, ["eval", "--test", str(tiny_pair_csv), "--router", "zero", "--bootstrap", "0",
                              "--plot", str(tmp_path / "ev.txt")])
    assert res.exit_code == 2 and "name a .png, .svg, .pdf file" in res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)
