"""Fixtures of the evaluation tests.

``data_dir`` (real outcome data) comes from ``tests/conftest.py``. ``tiny_csv``: a small
RouterBench-style file written per test, in which the topic word of a prompt decides which
model answers it well, so a router that reads the prompt can beat the zero router.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest


#: model -> (USD per call, topics it answers well)
TINY_MODELS = {"small": (0.001, {"greeting"}), "medium": (0.004, {"greeting", "poem"}),
               "large": (0.02, {"greeting", "poem", "proof"})}
TOPICS = ("greeting", "poem", "proof")




@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MIXROUTE_CACHE_DIR", str(tmp_path / "cache"))


def write_tiny(path: Path, n: int = 90, seed: int = 0, two_models: bool = False, start: int = 0) -> Path:
    """A RouterBench-style CSV of ``n`` prompts numbered from ``start`` (see the module docstring)."""
    rng = np.random.default_rng(seed)
    models = {k: v for k, v in TINY_MODELS.items() if not two_models or k != "medium"}
    header = ["sample_id", "prompt", "eval_name", *models, *(f"{m}|total_cost" for m in models)]
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        for i in range(start, start + n):
            topic = TOPICS[i % 3]
            prompt = f"['please write a {topic} number {i} about {rng.choice(['cats', 'stars', 'rivers'])}']"
            scores = [1.0 if topic in good or rng.random() < 0.1 else 0.0 for _, good in models.values()]
            w.writerow([i, prompt, "tiny", *scores, *(price for price, _ in models.values())])
    return path


def zero_router_report(tmp_path: Path, name: str, text: str) -> str:
    """Write ``text`` as the data file ``name``, run ``mixroute eval`` on it with the zero
    router (no bootstrap) and return its Markdown report (the dataset line counts dropped rows)."""
    from typer.testing import CliRunner

    from gateway.cli import app

    data = tmp_path / name
    data.write_text(text)
    res = CliRunner().invoke(app, ["eval", "--test", str(data), "--router", "zero", "--bootstrap", "0",
                                   "--report", str(tmp_path / "r.md")])
    assert res.exit_code == 0, res.output
    return (tmp_path / "r.md").read_text()


@pytest.fixture
def tiny_csv(tmp_path) -> Path:
    return write_tiny(tmp_path / "tiny.csv")


@pytest.fixture
def tiny_pair_csv(tmp_path) -> Path:
    return write_tiny(tmp_path / "pair.csv", two_models=True)
