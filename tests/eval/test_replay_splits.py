"""``bench.replay_splits``: the static per-file rule is fitted on the train split only and its
ratios are the recorded sums (no prediction involved)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from router.classify.data import split_of

MODELS = ("strong", "cheap", "cheaper")


def _prompts(split: str, n: int, tag: str) -> list[str]:
    out, i = [], 0
    while len(out) < n:
        text = f"{tag} question number {i}"
        if split_of(text) == split:
            out.append(text)
        i += 1
    return out


def _csv(path: Path, rows: list[tuple[str, dict[str, float]]]) -> None:
    head = ["sample_id", "prompt", "eval_name", *MODELS, *(f"{m}|total_cost" for m in MODELS)]
    cost = {"strong": 1.0, "cheap": 0.1, "cheaper": 0.01}
    lines = [",".join(head)]
    for i, (prompt, scores) in enumerate(rows):
        lines.append(",".join([f"s.{i}", f"\"['{prompt}']\"", "e", *(str(scores[m]) for m in MODELS),
                               *(str(cost[m]) for m in MODELS)]))
    path.write_text("\n".join(lines) + "\n")


def test_static_rule_is_fitted_on_train_and_ratios_are_recorded_sums(tmp_path: Path) -> None:
    # On train, "cheap" matches "strong" and "cheaper" reaches only half; on test, "cheap" fails.
    train = [(p, {"strong": 1.0, "cheap": 1.0, "cheaper": float(i % 2)}) for i, p in enumerate(_prompts("train", 10, "a"))]
    test = [(p, {"strong": 1.0, "cheap": 0.0, "cheaper": 1.0}) for p in _prompts("test", 4, "a")]
    _csv(tmp_path / "one.csv", train + test)
    out = tmp_path / "out.json"
    subprocess.run([sys.executable, "-m", "bench.replay_splits", str(tmp_path), "--strong", "strong", "--bar", "0.9",
                    "--json", str(out)], check=True, capture_output=True, text=True)
    rec = json.loads(out.read_text())
    assert rec["static_rule"] == {"one": "cheap"}  # "cheaper" is cheaper but below the bar on train
    assert rec["splits"]["train"]["static_quality_ratio"] == 1.0
    assert rec["splits"]["train"]["static_cost_ratio"] == 0.1
    assert rec["splits"]["test"]["rows"] == 4
    assert rec["splits"]["test"]["static_quality_ratio"] == 0.0  # the rule does not look at test rows
    assert rec["splits"]["test"]["files"]["one"]["models"]["cheaper"]["quality_ratio"] == 1.0
    assert rec["splits"]["calib"] == {"rows": 0, "files": {"one": {"rows": 0, "strong_mean": None, "models": {}}},
                                      "static_quality_ratio": None, "static_cost_ratio": None}
