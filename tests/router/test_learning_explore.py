"""Exploration: the recorded propensity is the probability the draw really has."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from router.decision import Candidate
from router.learning.explore import explore


def _cand(name: str, sd: float, eligible: bool = True, slo: bool = True) -> Candidate:
    return Candidate(backend=name, model=name, predicted_quality=0.5, expected_cost_usd=0.0,
                     expected_output_tokens=1, eligible=eligible, meets_slo=slo, quality_sd=sd)


@pytest.mark.parametrize("p_greedy", [1.0, 0.7])
def test_recorded_propensities_match_the_frequencies(p_greedy: float) -> None:
    cands = [_cand("g", 0.05), _cand("a", 0.2), _cand("b", 0.1), _cand("slow", 0.3, slo=False)]
    rng = random.Random(1)
    seen: Counter[str] = Counter()
    recorded: dict[str, float] = {}
    n = 40_000
    for _ in range(n):
        pick = explore(0.2, cands, cands[0], p_greedy, rng)
        seen[pick.chosen.backend] += 1
        recorded[pick.chosen.backend] = pick.propensity
        assert pick.explored == (pick.chosen.backend != "g")
    assert "slow" not in seen  # over the route's TTFT SLO: never explored
    u = {"g": 0.05 / 0.35, "a": 0.2 / 0.35, "b": 0.1 / 0.35}
    assert recorded["g"] == pytest.approx(0.8 * p_greedy + 0.2 * u["g"])
    for name in ("a", "b"):
        assert recorded[name] == pytest.approx(0.2 * u[name])
        assert seen[name] / n == pytest.approx(recorded[name], abs=0.01)
    # The greedy side's frequency is what exploration leaves it (p_greedy is the caller's draw).
    assert seen["g"] / n == pytest.approx(0.8 + 0.2 * u["g"], abs=0.01)


def test_a_refusing_route_explores_only_candidates_that_clear_its_bar() -> None:
    cands = [_cand("g", 0.1), _cand("below", 0.3, eligible=False), _cand("above", 0.1)]
    rng = random.Random(2)
    picks = {explore(0.5, cands, cands[0], 1.0, rng, bar_only=True).chosen.backend for _ in range(2000)}
    assert picks == {"g", "above"}


def test_no_exploration_when_off_or_nothing_else_to_try() -> None:
    cands = [_cand("g", 0.1), _cand("a", 0.3)]
    assert explore(0.0, cands, cands[0], 0.6, random.Random()).propensity == 0.6
    one = explore(0.3, cands[:1], cands[0], 1.0, random.Random())
    assert (one.chosen.backend, one.propensity, one.explored) == ("g", 1.0, False)


def test_exact_estimates_are_explored_uniformly() -> None:
    cands = [_cand("g", 0.0), _cand("a", 0.0), _cand("b", 0.0)]
    pick = explore(1.0 - 1e-12, cands, cands[0], 1.0, random.Random(3))
    assert pick.propensity == pytest.approx(1 / 3)
