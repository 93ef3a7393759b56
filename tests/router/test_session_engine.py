"""Session economics in the decision engine (router.session: keep_session, session_signal)."""

from __future__ import annotations

import pytest

from router.engine import Router, RoutingRequest
from router.policy import parse_policy
from router.predict import Prediction
from router.session import SessionState, weigh

POLICY = """version: 1
backends:
  - {name: strong, kind: fake, model: strong, quality: 0.90, pricing: {input_per_1m: 10, output_per_1m: 30, cached_input_per_1m: 1}}
  - {name: mid, kind: fake, model: mid, quality: 0.86, pricing: {input_per_1m: 1, output_per_1m: 3, cached_input_per_1m: 0.1}}
  - {name: weak, kind: fake, model: weak, quality: 0.60, pricing: {input_per_1m: 0.1, output_per_1m: 0.1}}
routes:
  - {name: auto, backends: [strong, mid, weak], quality_bar: {target: 0.95}}
  - {name: thrifty, backends: [strong, mid, weak], quality_bar: {target: 0.95}, session: {allow_downgrade: true}}
  - {name: once, backends: [strong, mid, weak], quality_bar: {target: 0.95}, session: {max_switches: 0, allow_downgrade: true}}
  - {name: alone, backends: [strong, mid, weak], quality_bar: {target: 0.95}, session: {enabled: false}}
"""


class HardTurns:
    """A predictor that finds prompts containing 'PROVE' hard: only 'strong' clears a bar there."""

    async def predict(self, text, backends):
        hard = "PROVE" in text
        quality = {"strong": 0.9, "mid": 0.5 if hard else 0.86, "weak": 0.3 if hard else 0.6}
        return Prediction(quality={b.name: quality[b.name] for b in backends}, output_tokens=200, source="test")


def _req(route: str, session: SessionState | None, text: str = "hello " * 4000) -> RoutingRequest:
    return RoutingRequest("chat", {"model": route, "messages": [{"role": "user", "content": text}]}, session=session)


@pytest.fixture
def router() -> Router:
    return Router(parse_policy(POLICY), predictor=HardTurns())


async def test_a_session_on_the_strong_model_stays_there_when_moving_down_is_not_allowed(router):
    fresh = await router.decide(_req("auto", None))
    assert fresh.record.chosen == "mid"  # alone, the cheapest above the bar
    on_strong = SessionState(id="s", backend="strong", turns=3, prefix_tokens=3900)
    d = await router.decide(_req("auto", on_strong))
    assert d.record.chosen == "strong" and d.record.reason == "session_kept"
    s = d.record.signals["session"]
    assert s["turn"] == 4 and s["on"] == "strong"
    assert s["switch"]["verdict"] == "stay" and s["switch"]["move_to"] == "mid"
    # Both sides are priced: staying reads the cached prefix, moving pays it cold.
    costs = {c.backend: c for c in d.candidates}
    assert costs["strong"].expected_cached_tokens == 3900 and costs["mid"].expected_cached_tokens == 0
    assert s["switch"]["stay_usd"] == pytest.approx(costs["strong"].expected_cost_usd)
    assert s["switch"]["move_usd"] == pytest.approx(costs["mid"].expected_cost_usd)


async def test_a_downgrade_happens_only_when_allowed_and_it_pays_over_the_rest(router):
    long_session = SessionState(id="s", backend="strong", turns=10, prefix_tokens=3900)
    d = await router.decide(_req("thrifty", long_session))
    assert d.record.chosen == "mid" and d.record.reason == "session_moved"
    assert d.record.signals["session"]["switch"]["verdict"] == "move"
    sw = d.record.signals["session"]["switch"]
    assert weigh(sw["stay_usd"], sw["move_usd"], sw["move_warm_usd"], sw["expected_rest"], sw["stay_warm_usd"])


async def test_a_cheap_session_is_escalated_when_its_turn_needs_a_stronger_model(router):
    on_mid = SessionState(id="s", backend="mid", turns=2, prefix_tokens=3900)
    d = await router.decide(_req("auto", on_mid, "PROVE it. " + "x " * 4000))
    assert d.record.chosen == "strong" and d.record.reason == "session_escalated"
    sw = d.record.signals["session"]["switch"]
    assert sw["verdict"] == "escalate" and sw["on"] == "mid" and sw["move_to"] == "strong"
    assert sw["stay_usd"] < sw["move_usd"]  # the priced switch: the stronger model costs more


async def test_max_switches_holds_a_session_in_place_but_never_below_the_bar(router):
    spent = SessionState(id="s", backend="strong", turns=10, switches=0, prefix_tokens=3900)
    once = await router.decide(_req("once", spent))
    assert once.record.chosen == "strong"  # no downgrade allowed beyond max_switches: 0
    on_mid = SessionState(id="s", backend="mid", turns=2, switches=5, prefix_tokens=3900)
    d = await router.decide(_req("once", on_mid, "PROVE it. " + "x " * 4000))
    assert d.record.chosen == "strong" and d.record.reason == "session_escalated"


async def test_sessions_off_decides_alone(router):
    on_strong = SessionState(id="s", backend="strong", turns=3, prefix_tokens=3900)
    d = await router.decide(_req("alone", on_strong))
    assert d.record.chosen == "mid" and "session" not in d.record.signals


async def test_a_session_policy_block_is_validated():
    with pytest.raises(Exception, match="idle_s"):
        parse_policy(POLICY.replace("session: {enabled: false}", "session: {idle_s: 0}"))
    with pytest.raises(Exception, match="max_switch"):
        parse_policy(POLICY.replace("session: {enabled: false}", "session: {max_switch: 2}"))


def test_weigh_pays_only_over_enough_turns():
    # moving costs 5 now, then 1 a turn; staying costs 2 a turn
    assert not weigh(2.0, 5.0, 1.0, 2)
    assert weigh(2.0, 5.0, 1.0, 5)
    # a current backend whose copy expired pays it again once (5 now), then 2 a turn: staying holds
    assert not weigh(5.0, 5.0, 1.0, 5, stay_warm_usd=1.0)
