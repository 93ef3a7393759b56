"""Fixtures of the calibration tests.

``nested_csv``: a RouterBench-style file of three models whose correct answers are nested
(``small`` solves easy prompts, ``medium`` easy and medium, ``large`` all, with a little
noise) and whose per-call prices rise with strength. :class:`TopicPredictor` reads the
difficulty word from the prompt, as a perfect-but-noisy quality head would.
"""

from __future__ import annotations

import csv
import hashlib
from pathlib import Path

import numpy as np
import pytest

from router.predict import Prediction

#: model -> (USD per call, highest difficulty it solves)
MODELS = {"small": (0.001, 0), "medium": (0.004, 1), "large": (0.02, 2)}
LEVELS = ("easy", "medium", "hard")

POLICY = """\
# a test policy; this comment must survive --write
version: 1
backends:
  - name: small   # the cheap one
    kind: fake
    model: small
    pricing: {per_request: 0.001}
  - name: medium
    kind: fake
    model: medium
    pricing: {per_request: 0.004}
  - name: large
    kind: fake
    model: large
    pricing: {per_request: 0.02}
routes:
  - name: auto
    backends: [small, medium, large]
    quality_bar:
      target: 0.95   # uncalibrated
    description: everything
  - name: other
    backends: [small, large]
"""


def write_nested(path: Path, n: int = 300, seed: int = 0, noise: float = 0.05) -> Path:
    """A RouterBench-style CSV of ``n`` prompts (see the module docstring)."""
    rng = np.random.default_rng(seed)
    header = ["sample_id", "prompt", "eval_name", *MODELS, *(f"{m}|total_cost" for m in MODELS)]
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        for i in range(n):
            level = int(rng.choice(3, p=[0.5, 0.3, 0.2]))
            prompt = f"['a {LEVELS[level]} question number {i}']"
            scores = [float((cap >= level) != (rng.random() < noise)) for _, cap in MODELS.values()]
            w.writerow([i, prompt, "nested", *scores, *(price for price, _ in MODELS.values())])
    return path


def _jitter(text: str, model: str) -> float:
    return int(hashlib.sha256(f"{model}:{text}".encode()).hexdigest()[:6], 16) / 2 ** 24 * 0.1 - 0.05


class TopicPredictor:
    """Predicted quality 0.9 where the model solves the prompt's level, else 0.3, +-0.05
    (``invert``: the other way round, a head that is always wrong)."""

    def __init__(self, invert: bool = False):
        self.invert = invert
        self.calls = 0

    async def predict(self, text, backends):
        self.calls += 1
        level = next(i for i, w in enumerate(LEVELS) if f" {w} " in text)
        q = {}
        for b in backends:
            solves = MODELS[b.model][1] >= level
            q[b.name] = 0.9 if solves != self.invert else 0.3
            q[b.name] += _jitter(text, b.model)
        return Prediction(quality=q)


def write_folder_of_two(tmp_path: Path) -> tuple[Path, Path]:
    """``(folder, inner)``: a folder ``d`` of two 40-row data files, ``inner`` its ``x.csv``."""
    folder = tmp_path / "d"
    folder.mkdir()
    inner = write_nested(folder / "x.csv", n=40)
    write_nested(folder / "y.csv", n=40, seed=1)
    return folder, inner


@pytest.fixture
def nested_csv(tmp_path) -> Path:
    return write_nested(tmp_path / "nested.csv")


@pytest.fixture
def policy_file(tmp_path) -> Path:
    p = tmp_path / "policy.yaml"
    p.write_text(POLICY, encoding="utf-8")
    return p


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MIXROUTE_CACHE_DIR", str(tmp_path / "cache"))


