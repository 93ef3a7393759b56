"""The outcome memory: discounted tallies and the Beta blend of research estimate and traffic."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from math import sqrt

import pytest

from backends.config import BackendConfig
from router.learning.memory import MIN_PROPENSITY, OutcomeMemory, Tally, research_weight, tally
from router.neighbours import posterior_sd
from router.policy.learning_config import LearningConfig
from router.predict import Prediction

NOW = datetime(2026, 12, 1, tzinfo=timezone.utc)


@dataclass
class Obs:
    backend: str
    score: float
    predicted: float | None
    source: str
    created_at: datetime
    probability: float | None = None


def _backend(name: str, quality: float | None = None) -> BackendConfig:
    return BackendConfig(name=name, kind="fake", model=name, quality=quality)


def test_weights_halve_every_half_life_and_follow_the_source() -> None:
    config = LearningConfig(half_life_hours=1, weights={"feedback": 1, "retry": 0.5, "judge": 0})
    rows = [Obs("a", 1.0, 0.5, "feedback", NOW), Obs("a", 0.0, 0.5, "feedback", NOW - timedelta(hours=1)),
            Obs("a", 0.0, 0.5, "retry", NOW), Obs("a", 1.0, 0.5, "judge", NOW)]
    t = tally(rows, config, NOW, {})["a"]
    assert t.weight == pytest.approx(1 + 0.5 + 0.5) and t.n == pytest.approx(2.0)
    assert t.score == pytest.approx(1.0)
    assert t.error == pytest.approx(0.5 - 0.25 - 0.25)


def test_chosen_traffic_is_weighted_by_the_inverse_of_its_probability() -> None:
    # The router sent "a" the easy prompts (score 1, probability 0.95) and, exploring, one
    # hard prompt (score 0, probability 0.05): over all prompts "a" is worse than its
    # traffic's plain mean says.
    rows = [Obs("a", 1.0, 0.5, "feedback", NOW, 0.95) for _ in range(19)] + [Obs("a", 0.0, 0.5, "feedback", NOW, 0.05)]
    t = tally(rows, LearningConfig(), NOW, {})["a"]
    a = 19 / 0.95 + 1 / 0.05
    assert t.mean == pytest.approx((19 / 0.95) / a)
    assert t.n == pytest.approx(a * a / (19 / 0.95 ** 2 + 1 / 0.05 ** 2))  # Kish: fewer than 20
    assert t.n < 20
    tiny = tally([Obs("a", 0.0, 0.5, "feedback", NOW, 1e-9)], LearningConfig(), NOW, {})["a"]
    assert tiny.weight == pytest.approx(1 / MIN_PROPENSITY)  # clipped


def test_an_unknown_estimate_counts_from_the_backend_prior() -> None:
    t = tally([Obs("a", 1.0, None, "feedback", NOW)], LearningConfig(), NOW, {"a": 0.75})["a"]
    assert t.error == pytest.approx(0.25)


def _adjust(tallies: dict[str, Tally], prediction: Prediction, backends, config=LearningConfig()) -> Prediction:
    memory = OutcomeMemory()
    memory.replace(tallies)
    return memory.adjust(prediction, backends, config)


def test_a_prior_only_backend_gets_the_beta_posterior_of_its_traffic() -> None:
    config = LearningConfig(prior_weight=2)
    b = _backend("new", quality=0.9)
    rows = [Obs("new", 0.0, 0.9, "feedback", NOW) for _ in range(8)]
    out = _adjust(tally(rows, config, NOW, {}), Prediction(quality={"new": 0.9}), [b], config)
    q = (2 * 0.9 + 0) / (2 + 8)
    assert out.quality["new"] == pytest.approx(q)
    assert out.quality_sd["new"] == pytest.approx(sqrt(q * (1 - q) / (2 + 8 + 1)), abs=1e-6)
    assert out.signals["learning"] == {"before": {"new": 0.9}, "observations": {"new": 8.0}}


def test_uncertainty_shrinks_as_observations_accumulate() -> None:
    b = _backend("new", quality=0.5)
    sds = []
    for n in (0, 10, 100, 1000):
        rows = [Obs("new", float(i % 2), 0.5, "feedback", NOW) for i in range(n)]
        sds.append(_adjust(tally(rows, LearningConfig(), NOW, {}), Prediction(quality={"new": 0.5}), [b]).quality_sd["new"])
    assert sds == sorted(sds, reverse=True) and sds[-1] < 0.02 < 0.25 < sds[0]


def test_a_research_estimate_counts_as_its_own_observations_and_moves_by_the_average_error() -> None:
    config = LearningConfig(max_research_weight=1000)
    q, n = 0.8, 40.0
    sd = float(posterior_sd(q, n))
    assert research_weight(q, sd, config) == pytest.approx(n)
    assert research_weight(q, sd, LearningConfig(max_research_weight=10)) == 10
    # Two prompts with different research estimates: traffic moves both by the backend's
    # error, shrunk by n0, so their ranking stays.
    t = {"m": Tally(weight=40.0, square=40.0, error=-0.2 * 40, score=0.0)}
    out = _adjust(t, Prediction(quality={"m": q}, quality_sd={"m": sd}), [_backend("m")], config)
    assert out.quality["m"] == pytest.approx(q - 0.2 * 40 / (n + 40))
    out2 = _adjust(t, Prediction(quality={"m": 0.6}, quality_sd={"m": float(posterior_sd(0.6, n))}),
                   [_backend("m")], config)
    assert out2.quality["m"] < out.quality["m"]


def test_without_a_learning_block_predictions_are_untouched() -> None:
    p = Prediction(quality={"a": 0.7})
    assert _adjust({"a": Tally(weight=10, square=10, error=-5)}, p, [_backend("a")], None) is p


def test_the_learning_block_is_validated_with_its_line(tmp_path) -> None:
    from router.policy import PolicyError
    from router.policy.loader import load_policy

    path = tmp_path / "policy.yaml"
    path.write_text("""version: 1
backends:
  - {name: a, kind: fake, model: a}
routes:
  - {name: auto, backends: [a]}
learning:
  explore: 0.9
  typo: 1
""")
    with pytest.raises(PolicyError) as err:
        load_policy(path)
    text = str(err.value)
    assert "policy.yaml:7" in text and "explore" in text
    assert "policy.yaml:8" in text and "typo" in text


def test_a_prior_can_state_its_own_weight() -> None:
    config = LearningConfig(prior_weight=2, prior_weights={"known": 100})
    backends = [_backend("known", quality=0.8), _backend("new", quality=0.8)]
    t = {"known": Tally(weight=10, square=10, error=-8), "new": Tally(weight=10, square=10, error=-8)}
    out = _adjust(t, Prediction(quality={"known": 0.8, "new": 0.8}), backends, config)
    assert out.quality["known"] == pytest.approx(0.8 - 8 / 110, abs=1e-6)
    assert out.quality["new"] == pytest.approx(0.8 - 8 / 12, abs=1e-6)


def test_prior_weights_must_name_backends(tmp_path) -> None:
    from router.policy import PolicyError
    from router.policy.loader import load_policy

    path = tmp_path / "policy.yaml"
    path.write_text("""version: 1
backends:
  - {name: a, kind: fake, model: a}
routes:
  - {name: auto, backends: [a]}
learning:
  prior_weights: {a: 10, gpt5: 3}
""")
    with pytest.raises(PolicyError) as err:
        load_policy(path)
    assert "policy.yaml:7" in str(err.value) and "unknown backend 'gpt5'" in str(err.value)
