"""``bench.replay_sensitivity`` re-makes ``mixroute replay``'s decisions offline: with the
shipped settings its ratios must be the real replay's, or its other lines mean nothing."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

from bench.replay_sensitivity import auc, run
from tests.replay.test_command import ROOT, _mixroute


def test_auc_is_the_mann_whitney_statistic():
    outcome = np.array([1.0, 1.0, 0.0, 0.0])
    assert auc(np.array([0.9, 0.8, 0.2, 0.1]), outcome) == 1.0
    assert auc(np.array([0.1, 0.2, 0.8, 0.9]), outcome) == 0.0
    assert auc(np.array([0.5, 0.5, 0.5, 0.5]), outcome) == 0.5
    assert auc(np.array([0.9, 0.3, 0.5, 0.1]), outcome) == 0.75
    assert auc(np.array([0.9, 0.8]), np.array([1.0, 1.0])) is None


def test_the_shipped_line_is_the_real_replay(data_dir, tmp_path):
    pytest.importorskip("torch")
    data = data_dir / "routerbench"
    out = tmp_path / "replay.json"
    proc = subprocess.run([*_mixroute(), "replay", "--data", str(data), "--split", "heldout", "--seed", "2",
                           "--n", "40", "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(out.read_text())
    result = run(data, "heldout", 2, [40, 30], [("route_target", 0.95, 1.0)], n=40)
    shipped = next(line for line in result["lines"] if line["k"] == 40)
    assert shipped["runs"]["seed 2"] == pytest.approx([report["quality_ratio"], report["cost_ratio"]], abs=1e-12)
    assert result["rows"] == 40 and set(result["lines"][1]["runs"]) == {"data order", "seed 1", "seed 2"}
    aucs = result["within_source_auc"]
    assert set(aucs) == {"arc_challenge_train", "mbpp_train", "winograde_train"}


@pytest.mark.parametrize("args, message", [
    (["{missing}"], "no such file or folder"),
    (["{data}", "--split", "bogus"], "--split 'bogus': one of"),
    (["{data}", "--k", "40,"], "--k '40,': positive integers"),
    (["{data}", "--seeds", "-1"], "--seeds -1: 0-1000"),
    (["{data}", "--json", "{tmp}"], "is a folder"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message, capsys):
    """From a break-it pass: a missing folder, a bad split or an unwritable --json ended in a
    traceback (the last only after the whole run); every argument error named --k."""
    from bench.replay_sensitivity import main

    data = tmp_path / "empty"
    data.mkdir()
    argv = [a.format(missing=tmp_path / "nothere", data=data, tmp=tmp_path) for a in args]
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err
