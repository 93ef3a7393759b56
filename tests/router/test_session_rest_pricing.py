"""A session's move is priced over the expected rest of the session, for every bar-clearing
candidate (router.session.keep_session), not only for the turn's cheapest one.

Two providers' cache bills differ in shape: Anthropic charges 1.25x the input price to write
a prefix and 0.1x to read it; a provider without caching charges the input price on every
turn. The turn's cheapest backend is then often not the cheapest over the turns to come.
"""

from __future__ import annotations

import pytest

from router.engine import Router, RoutingRequest
from router.policy import parse_policy
from router.predict import Prediction
from router.session import SessionState

POLICY = """version: 1
default_route: thrifty
backends:
  - {name: sonnet, kind: fake, model: sonnet, quality: 0.90,
     pricing: {input_per_1m: 3, output_per_1m: 15, cached_input_per_1m: 0.3, cache_write_input_per_1m: 3.75}}
  - {name: haiku, kind: fake, model: haiku, quality: 0.86,
     pricing: {input_per_1m: 1, output_per_1m: 5, cached_input_per_1m: 0.1, cache_write_input_per_1m: 1.25}}
  - {name: nocache, kind: fake, model: nocache, quality: 0.86, pricing: {input_per_1m: 0.9, output_per_1m: 5}}
  - {name: tiny, kind: fake, model: tiny, quality: 0.5, pricing: {input_per_1m: 0.05, output_per_1m: 0.1}}
routes:
  - {name: thrifty, backends: [sonnet, haiku], quality_bar: {target: 0.95}, session: {allow_downgrade: true}}
  - {name: up, backends: [haiku, nocache, tiny], quality_bar: {target: 0.95}}
"""


class Turns:
    """Every model but ``tiny`` clears the bar; 'PROVE' turns leave ``tiny`` far below it."""

    async def predict(self, text, backends):
        hard = "PROVE" in text
        quality = {"sonnet": 0.9, "haiku": 0.86, "nocache": 0.86, "tiny": 0.3 if hard else 0.86}
        return Prediction(quality={b.name: quality[b.name] for b in backends}, output_tokens=200, source="test")


def _req(route: str, session: SessionState, text: str) -> RoutingRequest:
    return RoutingRequest("chat", {"model": route, "messages": [{"role": "user", "content": text}]}, session=session)


@pytest.fixture
def router() -> Router:
    return Router(parse_policy(POLICY), predictor=Turns())


async def test_a_move_down_is_weighed_even_when_staying_is_the_turns_cheapest(router):
    # 20k tokens warm on sonnet: this turn is cheaper there (reads at 0.3) than on haiku,
    # which prefills and writes all of it (1.25); every later turn on haiku reads at 0.1
    # and answers at a third of sonnet's price, so over ten turns haiku pays.
    on_sonnet = SessionState(id="s", backend="sonnet", turns=10, prefix_tokens=20_000)
    d = await router.decide(_req("thrifty", on_sonnet, "word " * 17_000))
    costs = {c.backend: c.expected_cost_usd for c in d.candidates}
    assert costs["sonnet"] < costs["haiku"]  # the turn alone stays
    assert d.record.chosen == "haiku" and d.record.reason == "session_moved"
    sw = d.record.signals["session"]["switch"]
    assert sw["verdict"] == "move" and sw["move_to"] == "haiku" and sw["expected_rest"] == 10
    assert sw["move_usd"] == pytest.approx(costs["haiku"]) and sw["stay_usd"] == pytest.approx(costs["sonnet"])
    assert sw["move_usd"] + 9 * sw["move_warm_usd"] < sw["stay_usd"] + 9 * sw["stay_warm_usd"]
    # A session near its start is expected to end soon: the cold prefill does not pay back.
    young = SessionState(id="s", backend="sonnet", turns=1, prefix_tokens=20_000)
    d = await router.decide(_req("thrifty", young, "word " * 17_000))
    assert d.record.chosen == "sonnet" and d.record.signals["session"]["switch"]["verdict"] == "stay"


async def test_an_escalation_goes_where_the_rest_of_the_session_is_cheapest(router):
    # On tiny, a hard turn: haiku and nocache clear the bar. nocache is the turn's cheapest
    # (0.9 against haiku's 1.25 to write the prefix), haiku the cheapest over the rest
    # (reads at 0.1 on every later turn).
    on_tiny = SessionState(id="s", backend="tiny", turns=6, prefix_tokens=20_000)
    d = await router.decide(_req("up", on_tiny, "PROVE it. " + "word " * 17_000))
    costs = {c.backend: c.expected_cost_usd for c in d.candidates}
    assert costs["nocache"] < costs["haiku"]
    assert d.record.chosen == "haiku" and d.record.reason == "session_escalated"
    sw = d.record.signals["session"]["switch"]
    assert sw["verdict"] == "escalate" and sw["on"] == "tiny" and sw["move_to"] == "haiku"
    assert sw["move_usd"] == pytest.approx(costs["haiku"]) and sw["expected_rest"] == 6
    # One turn to go (a second turn): the turn's cheapest is the cheapest over the rest.
    second = SessionState(id="s", backend="tiny", turns=1, prefix_tokens=20_000)
    d = await router.decide(_req("up", second, "PROVE it. " + "word " * 17_000))
    assert d.record.chosen == "nocache" and d.record.reason == "session_escalated"


async def test_a_session_opens_where_a_session_of_its_route_is_cheapest(router):
    text = "PROVE it. " + "word " * 17_000
    # No session seen yet on the route: its first turn is decided alone (nocache, the turn's cheapest).
    alone = await router.decide(_req("up", SessionState(id="a", explicit=False), text))
    assert alone.record.chosen == "nocache" and alone.record.signals["session"].get("switch") is None
    # The route's sessions have had ten turns each: a new one opens on haiku, whose cache
    # write pays back on the turns expected to follow; the record names the turn's cheapest.
    router.live = type(router.live)()
    for n in range(3):
        for turn in range(10):
            router.live.session_turn("up", first=turn == 0)
    assert router.live.session_turns("up") == 10
    d = await router.decide(_req("up", SessionState(id="b", explicit=False), text))
    assert d.record.chosen == "haiku" and d.record.reason == "session_opened"
    sw = d.record.signals["session"]["switch"]
    assert sw["verdict"] == "open" and sw["instead_of"] == "nocache" and sw["move_to"] == "haiku"
    assert sw["expected_rest"] == 10 and sw["on"] is None
    # Opening a session writes its prompt: haiku's first turn pays its 1.25x write, which the
    # turn's own price (a lone request may not be written) leaves out; nocache has no premium.
    costs = {c.backend: c.expected_cost_usd for c in d.candidates}
    assert sw["move_usd"] > costs["haiku"] and sw["stay_usd"] == pytest.approx(costs["nocache"])
    assert sw["move_usd"] + 9 * sw["move_warm_usd"] < sw["stay_usd"] + 9 * sw["stay_warm_usd"]
    assert router.live.session_turns("up") == 31 / 4  # the decision counted a new session
    # A dry run (/v1/route) shows the same and counts nothing.
    dry = RoutingRequest("chat", {"model": "up", "messages": [{"role": "user", "content": text}]},
                         session=SessionState(id="c", explicit=False), dry_run=True)
    assert (await router.decide(dry)).record.chosen == "haiku" and router.live.session_turns("up") == 31 / 4
