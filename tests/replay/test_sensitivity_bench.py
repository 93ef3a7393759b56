"""``bench.replay_sensitivity`` re-makes ``mixroute replay``'s decisions offline: with the
shipped settings its ratios must be the real replay's, or its other lines mean nothing."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

from bench.replay_sensitivity import auc, per_file_ceiling, run
from router.classify.memory import DEFAULT_K
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
    # The default order: the three files interleaved, as the acceptance command sends them.
    proc = subprocess.run([*_mixroute(), "replay", "--data", str(data), "--split", "heldout",
                           "--n", "40", "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(out.read_text())
    assert report["run"]["order"] == "interleaved"
    assert {r["model"] for r in report["requests"]} and len({r["row"] for r in report["requests"]}) == 40
    result = run(data, "heldout", 2, [DEFAULT_K, 30], [("route_target", 0.95, None, None)], n=40)
    shipped = next(line for line in result["lines"] if line["k"] == DEFAULT_K)
    assert shipped["runs"]["interleaved"] == pytest.approx([report["quality_ratio"], report["cost_ratio"]], abs=1e-12)
    assert result["rows"] == 40
    assert set(result["lines"][1]["runs"]) == {"data order", "interleaved", "seed 1", "seed 2"}
    aucs = result["within_source_auc"]
    assert set(aucs) == {"arc_challenge_train", "mbpp_train", "winograde_train"}


@pytest.mark.parametrize("args, message", [
    (["{missing}"], "no such file or folder"),
    (["{data}", "--split", "bogus"], "--split 'bogus': one of"),
    (["{data}", "--k", "40,"], "--k '40,': positive integers"),
    (["{data}", "--seeds", "-1"], "--seeds -1: 0-1000"),
    (["{data}", "--json", "{tmp}"], "is a folder"),
    (["{data}", "--cross-fit", "1"], "--cross-fit 1: 2-20 folds, or 0 for none"),
    (["{data}", "--samples", "-2"], "--samples -2: 0-1000"),
    (["{data}", "--sample-size", "0"], "--sample-size 0: at least 1"),
    (["{data}", "--fold-seed", "3"], "--fold-seed needs --cross-fit"),
    (["{data}", "--cross-fit", "5", "--fold-seed", "-1"], "--fold-seed -1: 0 or more"),
    (["{data}", "--linear", "fast"], "argument --linear: invalid choice"),
    (["{data}", "--cross-fit", "5", "--domain-means", "1.5"], "--domain-means 1.5: a weight in [0, 1]"),
    (["{data}", "--domain-means", "0.5"], "--domain-means needs --cross-fit"),
    (["{data}", "--cross-fit", "5", "--task-smoothing", "-0.1"], "--task-smoothing -0.1: a weight in [0, 1]"),
    (["{data}", "--task-smoothing", "0.5"], "--task-smoothing needs --cross-fit"),
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


def test_per_file_ceiling_buys_the_best_gain_per_dollar_first():
    # file a: cheap model 0 scores 1 of 2, strong model 1 scores 2 of 2 for 10x the cost;
    # file b: model 0 already scores what model 1 does (its step is never worth buying)
    score = np.array([[1, 1], [0, 1], [1, 1], [1, 1]], float)
    cost = np.array([[1, 10], [1, 10], [1, 10], [1, 10]], float)
    src = np.array(["a", "a", "b", "b"])
    # budget 0.35 of 40: 14; cheap everywhere costs 4, so 10 more buys 10/18 of file a's step
    q, c = per_file_ceiling(score, cost, src, 1, budget=0.35)
    assert c == pytest.approx(0.35) and q == pytest.approx((3 + 10 / 18) / 4)
    assert per_file_ceiling(score, cost, src, 1, budget=1.0) == (pytest.approx(1.0), pytest.approx(22 / 40))


def _heldout_rows(data_dir, n: int = 60):
    """``(prompts, scores (n, M) with NaN where not recorded, models)`` of the first ``n``
    held-out RouterBench rows."""
    from gateway.commands.replay import prepare

    plan, rows = prepare([data_dir / "routerbench"], split="heldout", n=n)
    models = list(plan.dataset.models)
    score = np.array([[np.nan if r.scores.get(m) is None else r.scores[m] for m in models] for r in rows])
    return [r.prompt for r in rows], score, models


def test_cross_fitted_estimates_never_read_their_own_row(data_dir):
    """Each row is estimated from the other folds only: changing a row's recorded scores
    moves other rows' estimates but never its own."""
    pytest.importorskip("torch")
    from bench.replay_estimates import crossfit_predictions

    prompts, score, models = _heldout_rows(data_dir)
    before = crossfit_predictions(prompts, score, models, [5], folds=3)[0][5][0]
    flipped = score.copy()
    flipped[0] = 1.0 - flipped[0]
    after = crossfit_predictions(prompts, flipped, models, [5], folds=3)[0][5][0]
    assert np.array_equal(before[0], after[0])
    assert not np.array_equal(before[1:], after[1:])  # row 0 is someone's neighbour in the other folds


def test_task_means_keep_each_files_level_and_drop_the_rows_variation():
    from bench.replay_estimates import source_means

    q = np.array([[0.2, 0.9], [0.4, 0.7], [0.6, 0.5], [0.1, 0.1]])
    src = np.array(["a", "a", "b", "a"])
    out = source_means(q, src)
    assert out[[0, 1, 3]] == pytest.approx(np.tile([0.7 / 3, 1.7 / 3], (3, 1)), abs=1e-4)
    assert out[2] == pytest.approx([0.6, 0.5])
    assert q[0, 0] == 0.2  # the input is left as it was


def test_domain_means_blend_each_row_with_its_domains_recorded_mean():
    from bench.replay_estimates import MIN_DOMAIN_ROWS, blend_domain_means

    q = np.array([[0.5, 0.5], [0.9, 0.1], [0.3, 0.3]])
    domains = np.array(["science", "science", "rare"])
    n = MIN_DOMAIN_ROWS
    memory = np.array([[1.0, np.nan]] * n + [[0.0, np.nan]] * n + [[1.0, 1.0]] * (n - 1))
    memory_domains = np.array(["science"] * (2 * n) + ["rare"] * (n - 1))
    out = blend_domain_means(q, memory, domains, memory_domains, 0.5)
    # science: model 0's recorded mean is 0.5; model 1 was never recorded there: estimate kept
    assert out[0] == pytest.approx([0.5, 0.5]) and out[1] == pytest.approx([0.7, 0.1])
    assert out[2] == pytest.approx([0.3, 0.3])  # fewer than MIN_DOMAIN_ROWS rows: left alone
    assert blend_domain_means(q, memory, domains, memory_domains, 0.0) == pytest.approx(q)


def test_task_smoothing_shrinks_only_the_other_folds_scores(data_dir):
    """``--task-smoothing`` moves the estimates (the neighbours read their file's means),
    and a row's own score still never reaches its own estimate, through its file's mean
    included."""
    pytest.importorskip("torch")
    from bench.replay_estimates import crossfit_predictions

    prompts, score, models = _heldout_rows(data_dir)
    groups = np.array(["f"] * len(prompts))
    raw = crossfit_predictions(prompts, score, models, [5], folds=3)[0][5][0]
    smooth = crossfit_predictions(prompts, score, models, [5], folds=3, smoothing=1.0, groups=groups)[0][5][0]
    assert not np.array_equal(raw, smooth)
    flipped = score.copy()
    flipped[0] = 1.0 - flipped[0]
    after = crossfit_predictions(prompts, flipped, models, [5], folds=3, smoothing=1.0, groups=groups)[0][5][0]
    assert np.array_equal(smooth[0], after[0])


def test_a_fold_seed_is_another_estimate_of_every_row(data_dir):
    """``--fold-seed`` assigns the rows to other folds: the same estimator, another draw of
    every row's neighbours, so the estimates move (the docs quote counts over fold seeds)."""
    pytest.importorskip("torch")
    from bench.replay_estimates import crossfit_predictions

    prompts, score, models = _heldout_rows(data_dir)
    seed0 = crossfit_predictions(prompts, score, models, [5], folds=3)[0][5][0]
    again = crossfit_predictions(prompts, score, models, [5], folds=3, seed=0)[0][5][0]
    seed1 = crossfit_predictions(prompts, score, models, [5], folds=3, seed=1)[0][5][0]
    assert np.array_equal(seed0, again)
    assert not np.array_equal(seed0, seed1)


def test_the_report_names_the_encoder_path_and_fold_seed(data_dir, tmp_path, capsys):
    pytest.importorskip("torch")
    from bench.replay_sensitivity import main

    out = tmp_path / "r.json"
    assert main([str(data_dir / "routerbench" / "mbpp_train.csv"), "--n", "30", "--seeds", "0", "--k", "5",
                 "--cross-fit", "3", "--fold-seed", "2", "--dtype", "float32", "--linear", "default",
                 "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["fold_seed"] == 2 and report["encoder"] == {"dtype": "float32", "linear": "default"}
    assert "encoder: float32, linear maps default; cross-fit fold seed 2" in capsys.readouterr().out


@pytest.mark.parametrize("text, parsed", [
    ("route_target=0.95", ("route_target", 0.95, None, None)),
    ("route_target=0.9:z=2:share", ("route_target", 0.9, 2.0, "share")),
    ("route_target=0.9:lagrangian:z=0", ("route_target", 0.9, 0.0, "lagrangian")),
    ("target=0.95", ("target", 0.95, None, None)),
])
def test_bars_parse(text, parsed):
    from bench.replay_sensitivity import parse_bar

    assert parse_bar(text) == parsed


@pytest.mark.parametrize("text", ["target=0.9:share", "route_target=0.9:greedy", "route_target=1.5", "route_target=0.9:z=9",
                                  "route_target=0.9:share:lagrangian", "route_target=0.9:z=1:z=2"])
def test_bad_bars_are_refused(text):
    import argparse

    from bench.replay_sensitivity import parse_bar

    with pytest.raises(argparse.ArgumentTypeError, match="give route_target=T"):
        parse_bar(text)


def test_a_sample_larger_than_the_data_is_refused(data_dir):
    from gateway.commands.replay_gateway import ReplayFailed

    with pytest.raises(ReplayFailed, match="--sample-size 100000: more than the 454 rows"):
        run(data_dir / "routerbench", "heldout", 0, [5], [("route_target", 0.95, None, None)], subsets=2,
            subset_size=100_000)
