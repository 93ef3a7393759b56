"""Retraining from own logs over HTTP: a gateway that explores collects feedback;
``mixroute train --from-logs`` (a store URL, and a ``logs export`` file) writes a new
adapter version; ``mixroute eval --adapters-version`` compares it with the logged
decisions off-policy on the held-out requests; promoted, the running gateway decides with
it. A corrupt export file is one line, exit 2, and no version."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from gateway.cli import app
from router.learning.versions import Versions
from tests.gateway.conftest import start_gateway, wait_row

POLICY = """version: 1
backends:
  - {name: cheap, kind: fake, model: cheap-model, quality: 0.9, pricing: {input_per_1m: 0.1, output_per_1m: 0.1}}
  - {name: strong, kind: fake, model: strong-model, quality: 0.85, pricing: {input_per_1m: 5, output_per_1m: 10}}
routes:
  - {name: auto, backends: [cheap, strong], quality_bar: {min_quality: 0.7}}
learning: {explore: 0.4, prior_weight: 2}
"""
#: The truth the feedback tells: cheap's answers are bad, strong's good.
SCORE = {"cheap": 0.0, "strong": 1.0}


def _cli(*args: str):
    return CliRunner().invoke(app, list(args))


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    """A gateway (learning frozen: one refresh an hour) after 80 rated requests."""
    tmp = tmp_path_factory.mktemp("train")
    gw = start_gateway(tmp, POLICY, adapters_dir=tmp / "adapters", adapters_poll_s=0.1, learning_refresh_s=3600,
                       store_flush_interval_s=0.02)
    last = None
    with httpx.Client(timeout=30) as client:
        for i in range(80):
            r = client.post(gw.v1 + "/chat/completions",
                            json={"model": "auto", "messages": [{"role": "user", "content": f"question {i}"}]})
            assert r.status_code == 200, r.text
            last = r.headers["x-mixroute-request-id"]
            fb = client.post(gw.v1 + "/feedback", json={"request_id": last,
                                                         "score": SCORE[r.headers["x-mixroute-backend"]]})
            assert fb.status_code == 202, fb.text
            time.sleep(0.005)  # distinct feedback times, so the held-out cut falls between them
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the last feedback row is written
        try:
            wait_row(gw.settings.database_url, "feedback", last, timeout=0.5)
            break
        except AssertionError:
            pass
    yield gw, tmp
    gw.stop()


def test_train_from_a_store_eval_and_promote(logged) -> None:
    gw, tmp = logged
    folder, policy = tmp / "adapters", tmp / "policy.yaml"
    res = _cli("train", "--from-logs", gw.settings.database_url, "--version", "v-logs", "--holdout", "0.25",
               "--policy", str(policy), "--adapters-dir", str(folder))
    assert res.exit_code == 0, res.output
    assert "prompts are not stored" in res.output and "no domain signal in the logs" in res.output
    info = json.loads((folder / "v-logs" / "version.json").read_text())
    assert info["parent"] == "shipped" and info["counts"]["trained"] == 60 and info["counts"]["held_out"] == 20
    assert info["holdout_from"] > info["trained_until"]
    tallies = json.loads((folder / "v-logs" / "outcomes.json").read_text())["tallies"]
    assert tallies["cheap"]["score"] == 0.0 and tallies["cheap"]["error"] < 0
    assert tallies["strong"]["score"] == pytest.approx(tallies["strong"]["weight"])  # all ones

    out = tmp / "eval.json"
    res = _cli("eval", "--adapters-version", "v-logs", "--logs", gw.settings.database_url, "--policy", str(policy),
               "--adapters-dir", str(folder), "--json", str(out))
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["randomised"] and doc["n"] > 0
    logged_arm, version = doc["arms"]["logged"], doc["arms"]["v-logs"]
    assert logged_arm["choices"] == {"cheap": doc["n"]}  # the greedy choice of the logged router
    assert version["choices"] == {"strong": doc["n"]}
    # Off-policy: the logged router's cheap answers score 0, the version's strong ones 1.
    assert logged_arm["realised"]["quality_dr"]["ci"][1] < version["realised"]["quality_dr"]["ci"][0]

    assert _cli("adapters", "promote", "v-logs", "--dir", str(folder)).exit_code == 0
    deadline = time.monotonic() + 10
    while True:
        got = httpx.post(gw.v1 + "/route", json={"messages": [{"role": "user", "content": "x"}]}, timeout=10).json()
        if got["adapter_version"] == "v-logs" or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert (got["adapter_version"], got["chosen"]) == ("v-logs", "strong"), got
    # The correction plus the held-out observations the live memory reads after trained_until.
    assert got["signals"]["learning"]["observations"]["cheap"] > tallies["cheap"]["weight"] ** 2 / tallies[
        "cheap"]["square"]


def test_train_from_an_export_file_and_a_corrupt_one(logged) -> None:
    gw, tmp = logged
    folder = tmp / "adapters-export"
    export = tmp / "logs.jsonl"
    res = _cli("logs", "export", str(export), "--database-url", gw.settings.database_url)
    assert res.exit_code == 0, res.output
    res = _cli("train", "--from-logs", str(export), "--version", "v-file", "--holdout", "0",
               "--adapters-dir", str(folder))
    assert res.exit_code == 0, res.output
    info = json.loads((folder / "v-file" / "version.json").read_text())
    assert info["counts"]["trained"] == 80 and info["holdout_from"] is None
    tallies = json.loads((folder / "v-file" / "outcomes.json").read_text())["tallies"]
    assert tallies["cheap"]["score"] == 0.0 and tallies["strong"]["score"] > 0

    for name, content in (("binary.jsonl", b"\x00\xff\xfe garbage \x81"),
                          ("truncated.jsonl", export.read_bytes()[: len(export.read_bytes()) // 2]),
                          ("bad.parquet", b"PAR1 not really")):
        bad = tmp / name
        bad.write_bytes(content)
        res = _cli("train", "--from-logs", str(bad), "--version", "v-bad", "--adapters-dir", str(folder))
        assert res.exit_code == 2, res.output
        lines = res.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: {bad}"), res.output
    assert not (folder / "v-bad").exists()
    assert Versions(folder).ids() == ["shipped", "v-file"]



DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


@pytest.mark.skipif(not DATA.is_dir(), reason=f"shared outcome data not found at {DATA}")
def test_train_from_logs_with_research_data_trains_the_versions_heads(logged) -> None:
    pytest.importorskip("peft")
    gw, tmp = logged
    folder = tmp / "adapters-research"
    res = _cli("train", "--from-logs", gw.settings.database_url, "--version", "v-research", "--adapters-dir",
               str(folder), "--data", str(DATA), "--heads", "domain", "--limit", "120", "--epochs", "1",
               "--max-tokens", "128")
    assert res.exit_code == 0, res.output
    heads = folder / "v-research" / "heads"
    assert {p.name for p in heads.iterdir()} >= {"quality", "domain", "pii"}  # the parent's, domain retrained
    assert (heads / "domain" / "MODEL_CARD.md").stat().st_mtime > (heads / "pii" / "MODEL_CARD.md").stat().st_mtime
    info = json.loads((folder / "v-research" / "version.json").read_text())
    assert "heads trained on the research data given" in info["notes"][1]
    assert _cli("adapters", "promote", "v-research", "--dir", str(folder)).exit_code == 0
