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


def test_the_other_side_of_a_draw_has_one_propensity_on_every_path() -> None:
    """The engine's choice is itself drawn (``g`` with 0.6, else ``h``): ``h`` sent by
    exploration after the draw took ``g`` is recorded with the same probability as ``h``
    taken by the draw, its true chance; inverse-propensity sums then count each backend once."""
    cands = [_cand("g", 0.1), _cand("h", 0.1), _cand("x", 0.1)]
    rng = random.Random(4)
    recorded: dict[str, set[float]] = {}
    weight: Counter[str] = Counter()
    n = 40_000
    for _ in range(n):
        took_g = rng.random() < 0.6
        chosen, other = (cands[0], cands[1]) if took_g else (cands[1], cands[0])
        pick = explore(0.3, cands, chosen, 0.6 if took_g else 0.4, rng, other=other)
        recorded.setdefault(pick.chosen.backend, set()).add(round(pick.propensity, 12))
        weight[pick.chosen.backend] += 1 / pick.propensity
    assert recorded == {"g": {round(0.7 * 0.6 + 0.1, 12)}, "h": {round(0.7 * 0.4 + 0.1, 12)}, "x": {0.1}}
    for name in ("g", "h", "x"):  # IPS of "always send to NAME": the mean weight is 1
        assert weight[name] / n == pytest.approx(1.0, abs=0.05)
    # both sides choosing one backend: that backend's greedy chance is 1
    same = explore(0.3, cands, cands[0], 0.6, random.Random(5), other=cands[0])
    assert same.chosen.backend != "g" or same.propensity == pytest.approx(0.7 + 0.1)


async def test_a_route_target_draw_and_exploration_log_true_propensities() -> None:
    """Through the engine: identical requests make the route_target bar draw between two
    backends on every request; with exploration on, every backend's inverse-propensity sum
    over the log is the number of requests (an unbiased IPS of 'always that backend')."""
    from router.engine import Router, RoutingRequest
    from router.live import LiveState
    from router.policy import parse_policy
    from router.predict import Prediction

    class Same:
        async def predict(self, text, backends):
            return Prediction(quality={"strong": 0.9, "mid": 0.75, "weak": 0.3}, source="table")

    policy = parse_policy("""version: 1
backends:
  - {name: strong, kind: fake, model: strong, pricing: {per_request: 0.01}}
  - {name: mid, kind: fake, model: mid, pricing: {per_request: 0.002}}
  - {name: weak, kind: fake, model: weak, pricing: {per_request: 0.0001}}
routes:
  - {name: auto, backends: [strong, mid, weak], quality_bar: {route_target: 0.9, uncertainty_z: 0}}
learning: {explore: 0.2}
""")
    router = Router(policy, Same(), LiveState())
    weight: Counter[str] = Counter()
    drawn = 0
    n = 4000
    body = {"model": "auto", "messages": [{"role": "user", "content": "p"}]}
    for _ in range(n):
        d = await router.decide(RoutingRequest("chat", body))
        weight[d.record.chosen] += 1 / d.record.probability
        drawn += d.record.reason != "explore" and d.record.probability < 0.8
    assert drawn > n / 4  # the bar really draws
    for name in ("strong", "mid", "weak"):
        assert weight[name] / n == pytest.approx(1.0, abs=0.1), name


async def test_learning_seed_picks_the_sequence_of_draws() -> None:
    """The same policy explores the same requests the same way on every load; another
    ``learning.seed``, other draws (so replays of other prompts can explore independently)."""
    from router.engine import Router, RoutingRequest
    from router.policy import parse_policy

    text = """version: 1
backends:
  - {name: a, kind: fake, model: a, quality: 0.9, pricing: {per_request: 0.01}}
  - {name: b, kind: fake, model: b, quality: 0.6, pricing: {per_request: 0.001}}
  - {name: c, kind: fake, model: c, quality: 0.5, pricing: {per_request: 0.0001}}
routes:
  - {name: auto, backends: [a, b, c], quality_bar: {min_quality: 0.8}}
learning: {explore: 0.5SEED}
"""
    body = {"model": "auto", "messages": [{"role": "user", "content": "p"}]}

    async def draws(seed: str) -> list[str]:
        router = Router(parse_policy(text.replace("SEED", seed)))
        return [(await router.decide(RoutingRequest("chat", body))).record.chosen for _ in range(60)]

    default = await draws("")
    assert default == await draws(", seed: 0") and len(set(default)) == 3
    assert await draws(", seed: 7") == await draws(", seed: 7") != default
    for bad in ("-1", "x", "1.5"):
        with pytest.raises(Exception, match="seed"):
            parse_policy(text.replace("SEED", f", seed: {bad}"))
