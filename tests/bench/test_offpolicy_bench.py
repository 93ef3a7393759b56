"""bench.offpolicy: its policies and table on made-up documents, and the whole command on a
handful of real rows (real gateways, real ``policy what-if``)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from bench.offpolicy import OTHERS, compare, estimates, logging_policy, other_policy, realised, table

BASE = {"backends": [{"name": "a", "quality": 0.6}, {"name": "gpt-4-1106-preview", "quality": 0.9}],
        "routes": [{"name": "auto", "backends": ["a", "gpt-4-1106-preview"], "quality_bar": {"route_target": 0.95}}]}


def test_the_logging_and_the_other_policies() -> None:
    logged = logging_policy(BASE, 0.2, 5)
    assert logged["learning"] == {"explore": 0.2, "seed": 5}
    assert logged["routes"][0]["quality_bar"] == {"route_target": 0.95, "uncertainty_z": 0}
    assert "learning" not in BASE and "uncertainty_z" not in BASE["routes"][0]["quality_bar"]  # a copy
    same, lower, fewer = (other_policy(logged, change) for change in OTHERS.values())
    assert "learning" not in same and same["routes"] == logged["routes"]
    assert lower["routes"][0]["quality_bar"] == {"route_target": 0.85, "uncertainty_z": 0}
    assert fewer["routes"][0]["backends"] == ["a"] and len(fewer["backends"]) == 2
    assert "learning" in logged and logged["routes"][0]["backends"] == ["a", "gpt-4-1106-preview"]


def test_estimates_against_the_realised_figures() -> None:
    whatif = {"n": 10, "changed": 0.7, "realised": {"quality_dr": {"value": 0.7, "ci": [0.6, 0.8], "n": 10, "method": "doubly_robust"},
                           "quality_ips": {"value": 0.5, "ci": [0.1, 0.65], "n": 10, "method": "ips"},
                           "cost_dr": {"value": 1e-3, "ci": [8e-4, 1.2e-3], "n": 9, "method": "doubly_robust"},
                           "cost_ips": None}}
    assert set(estimates(whatif)) == {("quality", "dr"), ("quality", "ips"), ("cost", "dr")}
    assert estimates({"realised": {}}) == {}
    report = {"requests": [{"model": "a", "score": 1.0, "cost_usd": 2e-3},
                           {"model": "a", "score": 0.4, "cost_usd": 0.0},
                           {"model": None, "score": None, "cost_usd": None}]}  # a failed request is not counted
    real = realised(report)
    assert real == pytest.approx({"quality": 0.7, "cost": 1e-3})
    rows = compare("p", whatif, real)
    assert [(r["reward"], r["estimator"], r["inside"], r["agree"]) for r in rows] == [
        ("quality", "dr", True, 3), ("quality", "ips", False, 3), ("cost", "dr", True, 3)]
    lines = table(rows)
    assert len(lines) == 2 + len(rows) and lines[2].endswith("yes") and lines[3].endswith("NO")
    assert "0.500 [0.100, 0.650]" in lines[3] and "1.000e-03 [8.000e-04, 1.200e-03]" in lines[4]


def test_a_few_real_rows_end_to_end(data_dir: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    from bench.offpolicy import main

    # bench.learning_task.replay sets these for its gateways: restored after the test
    for name in ("MIXROUTE_CLASSIFIER", "MIXROUTE_LEARNING_REFRESH_S", "MIXROUTE_STORE_FLUSH_INTERVAL_S"):
        monkeypatch.setenv(name, "off" if name == "MIXROUTE_CLASSIFIER" else "1")
    main(["--data", str(data_dir / "routerbench"), "--rows", "40", "--seed", "3", "--explore", "0.3",
          "--out", str(tmp_path)])
    out = capsys.readouterr().out
    rows = json.loads((tmp_path / "offpolicy.json").read_text())
    # every policy, both rewards, both estimators
    assert {(r["policy"], r["reward"], r["estimator"]) for r in rows} == {
        (p, reward, est) for p in OTHERS for reward in ("quality", "cost") for est in ("dr", "ips")}
    for r in rows:
        assert all(math.isfinite(x) for x in (r["value"], *r["ci"], r["realised"]))
        assert r["ci"][0] <= r["value"] <= r["ci"][1] and r["n"] == 40
        assert r["inside"] == (r["ci"][0] <= r["realised"] <= r["ci"][1]) and 0 <= r["agree"] <= 40
        if r["reward"] == "quality":
            assert 0.0 <= r["realised"] <= 1.0
    # the exploration run explored, and its store holds every decision with its probability
    explore = json.loads((tmp_path / "explore.json").read_text())
    assert len(explore["requests"]) == 40 and explore["errors"] == 0
    assert "exploration run: 40 prompts (seed 3)" in out and f"of {len(rows)}" in out
    assert len([line for line in out.splitlines() if line.endswith((" yes", " NO"))]) == len(rows)
