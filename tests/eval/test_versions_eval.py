"""Retraining from logs and comparing versions off-policy, on a synthetic exploration log
whose truth is known: the cheap backend answers math well and code badly, the strong one
both fairly well. One error per backend sends everything to the strong backend; the
version's per-domain offsets keep math on the cheap one, and the off-policy estimates rank
the three sets of choices as the truth does."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from router.eval.versions import LOGGED, Arm, compare
from router.eval.whatif import Logged
from router.learning.baked import Baked
from router.learning.from_logs import DOMAIN_SHRINK, LogObservation, bake, domain_offsets, from_export, split
from router.learning.memory import OutcomeMemory
from router.policy import load_policy
from router.policy.learning_config import LearningConfig
from router.predict import Prediction

POLICY = """version: 1
backends:
  - {name: cheap, kind: fake, model: cheap-model, quality: 0.8, pricing: {input_per_1m: 0.1, output_per_1m: 0.1}}
  - {name: strong, kind: fake, model: strong-model, quality: 0.75, pricing: {input_per_1m: 5, output_per_1m: 10}}
routes:
  - {name: auto, backends: [cheap, strong], quality_bar: {min_quality: 0.7}}
learning: {}
"""
T0 = datetime(2026, 12, 1, tzinfo=timezone.utc)
TRUTH = {("cheap", "math"): 1.0, ("cheap", "code"): 0.0, ("strong", "math"): 0.9, ("strong", "code"): 0.9}


def _log(n: int, seed: int) -> list[dict]:
    """Export rows of a router that sends 30% of requests to strong at random."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        domain = "math" if i % 2 else "code"
        chosen = "strong" if rng.random() < 0.3 else "cheap"
        rows.append({
            "request_id": f"r{seed}-{i}", "created_at": (T0 + timedelta(minutes=i)).isoformat(), "route": "auto",
            "chosen": chosen, "probability": 0.3 if chosen == "strong" else 0.7, "backend": chosen,
            "candidates": [{"backend": "cheap", "model": "cheap-model", "predicted_quality": 0.8,
                            "expected_cost_usd": 1e-6, "expected_output_tokens": 100},
                           {"backend": "strong", "model": "strong-model", "predicted_quality": 0.75,
                            "expected_cost_usd": 1e-3, "expected_output_tokens": 100}],
            "signals": {"domain": domain, "learning": {"before": {"cheap": 0.8, "strong": 0.75}}},
            "tokens_in": 20, "tokens_out": 100, "cost_usd": 1e-6 if chosen == "cheap" else 1e-3,
            "feedback_score_mean": TRUTH[(chosen, domain)],
        })
    return rows


def test_domain_offsets_are_the_shrunk_deviation_from_the_backends_error() -> None:
    obs = [LogObservation(f"r{i}", "cheap", 1.0 if i % 2 else 0.0, 0.8, None, "feedback", T0,
                          "math" if i % 2 else "code") for i in range(80)]
    offsets = domain_offsets(obs, LearningConfig(), T0, {})
    # errors +0.2 (math) and -0.8 (code), the backend's -0.3; 40 each
    assert offsets["cheap"]["math"] == pytest.approx(0.5 * 40 / (40 + DOMAIN_SHRINK))
    assert offsets["cheap"]["code"] == pytest.approx(-0.5 * 40 / (40 + DOMAIN_SHRINK))


def test_the_memory_applies_a_domains_offset_and_says_so() -> None:
    from backends.config import BackendConfig

    memory = OutcomeMemory({"cheap": {"code": -0.3}})
    cheap = BackendConfig(name="cheap", kind="fake", model="m", quality=0.8)
    got = memory.adjust(Prediction(quality={"cheap": 0.8}, signals={"domain": "code"}), [cheap], LearningConfig())
    assert got.quality["cheap"] == pytest.approx(0.5)
    assert got.signals["learning"]["domain_offset"] == {"cheap": -0.3}
    same = memory.adjust(Prediction(quality={"cheap": 0.8}, signals={"domain": "math"}), [cheap], LearningConfig())
    assert same.quality["cheap"] == pytest.approx(0.8) and "domain_offset" not in same.signals["learning"]


def test_offsets_beat_one_error_per_backend_off_policy(tmp_path: Path) -> None:
    (tmp_path / "policy.yaml").write_text(POLICY)
    policy = load_policy(tmp_path / "policy.yaml")
    train, _, _ = split(from_export(_log(400, seed=1)), 0.0)
    full = bake(train, LearningConfig(), {})
    assert set(full.offsets["cheap"]) == {"math", "code"}
    per_backend = Baked(full.trained_until, full.tallies)  # the same correction without its offsets
    held = _log(400, seed=2)
    rows = [Logged.from_row(r) for r in held]
    times = [datetime.fromisoformat(r["created_at"]) for r in held]
    result = compare(policy, rows, times, [Arm(LOGGED), Arm("per-backend", per_backend), Arm("domains", full)])
    arms = result.arms
    assert arms[LOGGED]["choices"] == {"cheap": 400}
    assert arms["per-backend"]["choices"] == {"strong": 400}
    assert arms["domains"]["choices"] == {"cheap": 200, "strong": 200}
    value = {name: a["realised"]["quality_dr"]["value"] for name, a in arms.items()}
    # the truth: 0.5 (cheap everywhere), 0.9 (strong everywhere), 0.95 (cheap on math)
    for name, truth in ((LOGGED, 0.5), ("per-backend", 0.9), ("domains", 0.95)):
        ci = arms[name]["realised"]["quality_dr"]["ci"]
        assert ci[0] <= truth <= ci[1], (name, ci)
    assert value[LOGGED] < value["per-backend"] < value["domains"]
