"""The route-level bar ``route_target``: the controller's exact solve and the engine's use of it."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from router.aggregate import BUCKETS, REBUILD_EVERY, RouteTarget, hull_steps, share_steps
from router.engine import Router, RoutingRequest
from router.live import LiveState
from router.policy import parse_policy
from router.policy.quality_bar import DEFAULT_ALLOCATION, DEFAULT_UNCERTAINTY_Z
from router.predict import Prediction

POLICY = """version: 1
backends:
  - {name: strong, kind: fake, model: strong, pricing: {per_request: 0.01}}
  - {name: mid, kind: fake, model: mid, pricing: {per_request: 0.002}}
  - {name: weak, kind: fake, model: weak, pricing: {per_request: 0.0001}}
routes:
  - {name: auto, backends: [strong, mid, weak], quality_bar: BAR}
"""


BACKENDS = ("strong", "mid", "weak")


def _pick(points: list[tuple[float, float]], share: float) -> float:
    """The per-request relative rule, independently: the cheapest candidate predicting at
    least ``share x best`` (ties: the higher quality); its predicted quality."""
    best = max(q for _, q in points)
    ok = [(c, -q) for c, q in points if q + 1e-9 >= share * best]
    return -min(ok)[1]


def test_share_steps_walks_the_pareto_frontier():
    q0, best, steps = share_steps([(1.0, 0.5), (2.0, 0.4), (3.0, 0.8), (10.0, 1.0), (3.0, 0.7)])
    assert (q0, best) == (0.5, 1.0)  # (2, 0.4) is dominated by the cheaper (1, 0.5); (3, 0.7) by (3, 0.8)
    assert steps == [(0.5, pytest.approx(0.3)), (0.8, pytest.approx(0.2))]
    assert share_steps([(1.0, 0.7)]) == (0.7, 0.7, [])
    assert share_steps([(1.0, 0.0), (2.0, 0.0)]) == (0.0, 0.0, [])


def _utility_pick(points: list[tuple[float, float]], wtp: float) -> float:
    """The Lagrangian rule, independently: the candidate maximising ``wtp x quality - cost``
    (ties: the higher quality); its predicted quality."""
    if wtp == float("inf"):
        return max(q for _, q in points)
    return max((wtp * q - c, q) for c, q in points)[1]


def test_hull_steps_walks_the_upper_concave_hull():
    # (3, 0.55) is on the Pareto frontier but under the segment (1, 0.5)-(5, 0.9): never the
    # choice for any willingness to pay, since a mix of its neighbours beats it
    q0, best, steps = hull_steps([(1.0, 0.5), (3.0, 0.55), (5.0, 0.9), (2.0, 0.4), (9.0, 1.0)])
    assert (q0, best) == (0.5, 1.0)
    assert steps == [(pytest.approx(10.0), pytest.approx(0.4)), (pytest.approx(40.0), pytest.approx(0.1))]
    for wtp in (5.0, 15.0, 50.0):
        chosen = _utility_pick([(1.0, 0.5), (3.0, 0.55), (5.0, 0.9), (2.0, 0.4), (9.0, 1.0)], wtp)
        assert chosen == q0 + sum(g for r, g in steps if r < wtp)
    assert hull_steps([(1.0, 0.7)]) == (0.7, 0.7, [])
    assert hull_steps([(0.0, 0.3), (0.0, 0.6)]) == (0.6, 0.6, [])  # equally cheap: the better one only


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.lists(st.tuples(st.sampled_from([0.0, 0.001, 0.002, 0.01, 0.05]), st.floats(0.01, 1.0)),
                              min_size=1, max_size=5), min_size=1, max_size=40),
       target=st.floats(0.5, 1.0), window=st.integers(1, 50), allocation=st.sampled_from(["share", "lagrangian"]))
# A step whose price is exactly a bucket edge (here 0.04 / 0.4 = 0.1): at that edge the two
# candidates tie, and a tie goes to the higher quality (the engine's rule too).
@example(rows=[[(0.01, 0.5), (0.05, 0.9)]], target=0.75, window=1, allocation="lagrangian")
def test_solve_is_the_smallest_level_that_holds_the_target(rows, target, window, allocation):
    """Against brute force over the window's last requests, each request choosing by the
    rule independently (:func:`_pick` at a share, :func:`_utility_pick` at a willingness to
    pay): the controller's level reaches the target, and the next smaller level it could
    have set (one bucket lower) does not; the last request gets one of the two."""
    ctl = RouteTarget(target, window=window, allocation=allocation)
    for points in rows:
        level = ctl.add(points)
    kept = rows[-window:]
    best = sum(max(q for _, q in p) for p in kept)
    pick = _pick if allocation == "share" else _utility_pick

    def total(at: float) -> float:
        return sum(pick(p, at) for p in kept)

    high = ctl.level  # the solve's level; the last request may have drawn one bucket lower
    lower = ctl._edge(ctl._bucket) if ctl._bucket >= 0 else high
    assert len(ctl) == len(kept) and ctl.share == high and level in (high, lower)
    assert total(high) >= target * best - 1e-9
    if ctl._bucket >= 0 and 0 < high < float("inf"):  # (no bucket: nothing needed, or every step)
        # Just under the lower edge: a price exactly on it ties a step priced there, and the tie
        # takes the step, so the edge itself may still hold the target (found by a fresh run).
        below = lower * (1 - 1e-9) if allocation == "lagrangian" else lower
        assert total(below) < target * best + 1e-9


def test_an_unknown_allocation_is_refused():
    with pytest.raises(ValueError, match="allocation 'greedy': one of lagrangian, share"):
        RouteTarget(0.9, allocation="greedy")


def test_long_runs_are_rebuilt_exactly():
    """Every REBUILD_EVERY requests the sums are recomputed from the window: at that point they
    equal a fresh controller's bit for bit (adding and dropping gains alone leaves float dust)."""
    ctl = RouteTarget(0.9, window=3)
    for i in range(REBUILD_EVERY):
        ctl.add([(0.001, 0.3 + (i % 7) / 10), (0.01, 0.99)])
        ctl.chose(0.99 if i % 2 else 0.3 + (i % 7) / 10)
    fresh = RouteTarget(0.9, window=3)
    for row in list(ctl._rows):
        fresh._push(row, 1.0)
    assert (ctl._have, ctl._best, ctl._chosen, ctl._chosen_best) == (fresh._have, fresh._best, fresh._chosen,
                                                                     fresh._chosen_best)
    assert ctl._fine == fresh._fine and ctl._coarse == fresh._coarse


def test_window_forgets_old_requests():
    ctl = RouteTarget(0.9, window=4)
    for _ in range(10):
        ctl.add([(0.001, 0.5), (0.01, 1.0)])  # cheap gets half the best: only the strong one holds 0.9
    assert len(ctl) == 4 and ctl.share > 0.5
    for _ in range(4):
        ctl.add([(0.001, 0.95), (0.01, 1.0)])  # now cheap is enough everywhere
    assert ctl.share == 0.0


class _Table:
    """Predicted quality per prompt from a table (an in-file predictor, as the classifier's
    ``quality`` head would give)."""

    def __init__(self, table: dict[str, dict[str, float]]):
        self.table = table

    async def predict(self, text, backends):
        return Prediction(quality=dict(self.table[text]), source="table")


def _traffic() -> tuple[list[str], dict[str, dict[str, float]]]:
    """Easy prompts: mid predicts 0.93 of strong; hard ones: weak and mid far below strong."""
    table, order = {}, []
    for i in range(60):
        easy = i % 3 != 0
        table[f"p{i}"] = ({"strong": 0.9, "mid": 0.84, "weak": 0.5} if easy else {"strong": 0.8, "mid": 0.5, "weak": 0.3})
        order.append(f"p{i}")
    return order, table


async def _run(bar: str) -> tuple[float, float, float, list]:
    order, table = _traffic()
    router = Router(parse_policy(POLICY.replace("BAR", bar)), _Table(table), LiveState())
    chosen_q = best_q = cost = 0.0
    decisions = []
    for p in order:
        d = await router.decide(RoutingRequest("chat", {"model": "auto", "messages": [{"role": "user", "content": p}]}))
        c = {x.backend: x for x in d.candidates}[d.record.chosen]
        chosen_q += c.predicted_quality
        best_q += max(x.predicted_quality for x in d.candidates)
        cost += c.expected_cost_usd
        decisions.append(d)
    return chosen_q / best_q, cost, best_q, decisions


@pytest.mark.parametrize("allocation", ["share", "lagrangian", None])
async def test_route_target_holds_the_share_for_less_than_target(allocation):
    """Per request, ``target: 0.95`` needs the strong model everywhere (0.84 / 0.9 = 0.93);
    over the route, ``route_target: 0.95`` keeps 95% of the summed best predicted quality
    and sends the easy prompts to mid, under either allocation (None: the default)."""
    share_t, cost_t, _, _ = await _run("{target: 0.95}")
    extra = f", allocation: {allocation}" if allocation else ""
    share_r, cost_r, _, decisions = await _run("{route_target: 0.95" + extra + "}")
    assert share_t == 1.0
    assert share_r >= 0.94  # 0.95 in expectation: the last bucket's requests are drawn
    assert cost_r < cost_t * 0.6
    last = decisions[-1].record
    assert last.signals["bar_kind"] == {"route_target": 0.95}
    assert last.signals["allocation"] == (allocation or DEFAULT_ALLOCATION)
    if last.signals["allocation"] == "share":
        assert 0 < last.signals["route_share"] <= 1 and "route_wtp_usd" not in last.signals
    else:
        # the strong model's step on an easy prompt costs 0.008 USD for 0.06 of quality (0.133
        # USD per unit), on a hard one 0.008 for 0.3 (0.027): the window needs the hard ones only
        assert 0.02 < last.signals["route_wtp_usd"] < 0.14 and "route_share" not in last.signals
        chosen = {c["backend"]: c for c in last.candidates}
        assert chosen[last.chosen]["utility_usd"] == max(c["utility_usd"] for c in last.candidates)
    hard = [d.record.chosen for d in decisions[20:] if d.candidates[0].predicted_quality == 0.8]
    # the strong model goes where the predicted gap is largest: the hard prompts' step to it is
    # the last one the window needs, so each takes it with the drawn probability (about 0.97)
    assert hard and hard.count("strong") >= 0.8 * len(hard)
    easy = [d.record.chosen for d in decisions[20:] if d.candidates[0].predicted_quality == 0.9]
    # all but the odd one: the feedback also spends a surplus the draws left, and corrects
    # the shortfall that follows by raising the goal for a request or two
    assert easy.count("mid") >= len(easy) - 2
    drawn = [d.record.probability for d in decisions[20:] if d.candidates[0].predicted_quality == 0.8]
    assert all(0 < p <= 1 for p in drawn) and any(p < 1 for p in drawn)


async def test_route_target_state_survives_reload_of_the_same_bar():
    order, table = _traffic()
    live = LiveState()
    policy = parse_policy(POLICY.replace("BAR", "{route_target: 0.9, window: 100}"))
    for p in order[:30]:
        await Router(policy, _Table(table), live).decide(
            RoutingRequest("chat", {"model": "auto", "messages": [{"role": "user", "content": p}]}))
    z = DEFAULT_UNCERTAINTY_Z
    assert len(live.route_target("auto", 0.9, 100, BACKENDS, z=z)) == 30  # the default uncertainty_z and allocation
    assert len(live.route_target("auto", 0.9, 100, BACKENDS, z=z + 1)) == 0  # another z: afresh (other bounds)
    assert len(live.route_target("auto", 0.9, 100, BACKENDS[:2], z=z)) == 0  # other candidates: afresh
    assert len(live.route_target("auto", 0.95, 100, BACKENDS, z=z)) == 0  # a changed bar starts afresh
    other = "share" if DEFAULT_ALLOCATION == "lagrangian" else "lagrangian"
    assert len(live.route_target("auto", 0.95, 100, BACKENDS, z=z, allocation=other)) == 0  # another allocation


@pytest.mark.parametrize("bar, match", [
    ("{route_target: 0}", "route_target"),
    ("{route_target: 1.5}", "route_target"),
    ("{route_target: .nan}", "route_target"),
    ("{route_target: 0.9, target: 0.9}", "exactly one"),
    ("{target: 0.9, window: 10}", "window"),
    ("{route_target: 0.9, window: 0}", "window"),
    ("{route_target: 0.9, window: true}", "window"),
    ("{route_target: 0.9, window: 10001}", "window"),
])
def test_bad_route_target_is_a_policy_error(bar, match):
    from router.policy.loader import PolicyError

    with pytest.raises(PolicyError, match=match):
        parse_policy(POLICY.replace("BAR", bar))


def _drift(gain: float, monkeypatch, *, worse: bool = False, target: float = 0.95,
           seed: int = 0) -> tuple[float, float, float]:
    """A stream whose cheap candidate gets better over time (its predicted gap to the strong
    one shrinks): the counterfactual solve alone believes older requests went strong. With
    ``worse`` the opposite drift: the gap grows, and the solve believes older requests went
    cheap where they really went strong. Returns the share of the best the choices held over
    the run, the lowest window share after the first window, and the share sent strong."""
    import random

    import router.aggregate as agg

    monkeypatch.setattr(agg, "GAIN", gain)
    rng = random.Random(seed)
    gaps = sorted((rng.uniform(0, 0.5) for _ in range(2000)), reverse=not worse)
    ctl, held, strong = RouteTarget(target, window=64), [], 0
    worst = 1.0
    for i, gap in enumerate(gaps):
        points = [(0.1, 0.9 - gap), (1.0, 0.9)]
        share = ctl.add(points)
        chosen = min((p for p in points if p[1] + 1e-9 >= share * 0.9), key=lambda p: (p[0], -p[1]))
        ctl.chose(chosen[1])
        held.append(chosen[1] / 0.9)
        strong += chosen[0] == 1.0
        if i >= 64:
            worst = min(worst, ctl.held)
    return sum(held) / len(held), worst, strong / len(gaps)


def test_feedback_holds_the_target_on_the_choices_made_when_traffic_drifts(monkeypatch):
    overall, worst, _ = _drift(4.0, monkeypatch)
    assert overall >= 0.93 and worst >= 0.92
    blind, _, _ = _drift(0.0, monkeypatch)  # without feedback the route falls far short
    assert blind < 0.85


def test_peek_leaves_the_window_alone():
    ctl = RouteTarget(0.9, window=8)
    for _ in range(8):
        ctl.chose(0.9) if ctl.add([(0.001, 0.9), (0.01, 0.95)]) is not None else None
    state = (len(ctl), ctl.share, ctl.held, ctl._have, ctl._best, list(ctl._coarse))
    hard = [(0.001, 0.1), (0.01, 0.95)]
    peeked = ctl.peek(hard)
    assert (len(ctl), ctl.share, ctl.held, ctl._have, ctl._best, list(ctl._coarse)) == state
    assert ctl.add(hard) in (peeked, peeked - 1 / BUCKETS)  # adding it: the same, or its lower draw


def test_unusable_predictions_are_left_out():
    ctl = RouteTarget(0.9, window=8)
    ctl.add([(0.001, 0.5), (0.01, 1.0)])
    before = (len(ctl), ctl.share)
    for points in ([], [(0.001, float("nan"))], [(float("inf"), 0.5)], [(0.001, 0.0), (0.01, -1.0)]):
        assert ctl.add(points) == before[1]
        assert (len(ctl), ctl.share) == before
    assert share_steps([(0.001, float("nan")), (0.01, 0.8)]) == (0.8, 0.8, [])
    ctl.chose(float("nan"))
    assert ctl._chosen == 0.0
    ctl.add([(0.001, -0.5), (0.01, 1.0)])  # a negative quality counts as 0: a valid step
    assert ctl._rows[-1][0] == 0.0 and list(ctl._rows[-1][2]) == [0]


async def test_dry_runs_do_not_move_the_route():
    order, table = _traffic()
    live = LiveState()
    router = Router(parse_policy(POLICY.replace("BAR", "{route_target: 0.95, window: 8}")), _Table(table), live)

    def req(p: str, dry: bool) -> RoutingRequest:
        return RoutingRequest("chat", {"model": "auto", "messages": [{"role": "user", "content": p}]}, dry_run=dry)

    for p in order[:8]:
        await router.decide(req(p, False))
    ctl = live.route_target("auto", 0.95, 8, BACKENDS, z=1.0)
    state = (len(ctl), ctl.share, ctl.held)
    dry = [await router.decide(req("p0", True)) for _ in range(20)]
    assert (len(ctl), ctl.share, ctl.held) == state
    assert len({d.record.chosen for d in dry}) == 1 and dry[0].record.signals["route_held"] == ctl.held


async def test_steps_just_under_a_bucket_edge_are_crossed():
    """0.3 / 0.4 is 0.7499999999999999 in floats: the step sits just under a bucket edge,
    which the engine's tolerance counts as clearing that edge. Buckets follow the engine's
    test, so the route still reaches its target (it stayed at 0.75 when they did not)."""
    policy = POLICY.replace("BAR", "{route_target: 0.9}")
    table = {f"p{i}": {"strong": 0.4, "mid": 0.3, "weak": 0.3} for i in range(300)}
    router = Router(parse_policy(policy), _Table(table), LiveState())
    chosen = []
    for p in table:
        d = await router.decide(RoutingRequest("chat", {"model": "auto", "messages": [{"role": "user", "content": p}]}))
        chosen.append(d.record.chosen)
    assert 0.4 * len(chosen) < chosen.count("strong") < 0.8 * len(chosen)  # about 60% needed
    assert router.live.route_target("auto", 0.9, None, BACKENDS, z=1.0).held >= 0.88


def test_chose_credits_only_the_request_just_added():
    ctl = RouteTarget(0.9, window=8)
    ctl.add([(0.001, 0.5), (0.01, 1.0)])
    ctl.chose(None)  # refused
    ctl.add([(0.001, float("nan"))])  # nothing usable: not added
    ctl.chose(1.0)  # must not land on the refused request's row
    assert ctl._rows[-1][4] is None and ctl.held == 1.0
    ctl.add([(0.001, 0.5), (0.01, 1.0)])
    ctl.chose(0.5)
    ctl.chose(1.0)  # a second report for the same request is ignored
    assert ctl.held == pytest.approx(0.5)


async def test_a_reload_drops_the_windows_of_routes_without_the_bar(tmp_path):
    """Controllers are kept across reloads of the same bar (above) but a route that is deleted,
    or whose bar is no longer ``route_target``, used to keep its window in memory for good."""
    from gateway.runtime import PolicyHolder

    path = tmp_path / "policy.yaml"
    two = POLICY.replace("BAR", "{route_target: 0.9}") + \
        "  - {name: other, backends: [strong, mid], quality_bar: {route_target: 0.8}}\n"
    path.write_text(two)
    holder = PolicyHolder(path, _Table(_traffic()[1]))
    await holder.load()
    try:
        for route in ("auto", "other"):
            await holder.current.router.decide(
                RoutingRequest("chat", {"model": route, "messages": [{"role": "user", "content": "p1"}]}))
        assert set(holder.live._targets) == {"auto", "other"}
        path.write_text(POLICY.replace("BAR", "{route_target: 0.9}"))  # `other` deleted
        assert await holder.reload()
        assert set(holder.live._targets) == {"auto"}
        assert len(holder.live.route_target("auto", 0.9, None, BACKENDS, z=DEFAULT_UNCERTAINTY_Z)) == 1  # kept: same bar
        path.write_text(POLICY.replace("BAR", "{target: 0.9}"))
        assert await holder.reload()
        assert holder.live._targets == {}
    finally:
        await holder.aclose()


def test_answered_replaces_the_choice_until_the_row_leaves_the_window():
    ctl = RouteTarget(0.9, window=2)
    ctl.add([(1.0, 0.9), (0.1, 0.6)])
    row = ctl.chose(0.9)
    assert ctl.held == 1.0
    ctl.answered(row, 0.6)  # the fallback answered
    assert abs(ctl.held - 0.6 / 0.9) < 1e-12
    ctl.answered(row, float("nan"))  # ignored
    assert abs(ctl.held - 0.6 / 0.9) < 1e-12
    for _ in range(2):  # the row leaves the window
        ctl.add([(1.0, 0.9), (0.1, 0.6)])
        ctl.chose(0.9)
    ctl.answered(row, 0.0)
    assert ctl.held == 1.0
    assert ctl.chose(0.5) is None  # once per request


class _TableSd(_Table):
    def __init__(self, table, sd):
        super().__init__(table)
        self.sd = sd

    async def predict(self, text, backends):
        return Prediction(quality=dict(self.table[text]), quality_sd=dict(self.sd), source="table")


async def _choices(bar: str, sd: dict[str, float], n: int = 60) -> tuple[list[str], dict]:
    table = {"p": {"strong": 0.95, "mid": 0.9, "weak": 0.3}}
    policy = POLICY.replace("BAR", bar).replace("[strong, mid, weak]", "[strong, mid]")
    router = Router(parse_policy(policy), _TableSd(table, sd), LiveState())
    chosen = []
    for _ in range(n):
        d = await router.decide(RoutingRequest("chat", {"model": "auto", "messages": [{"role": "user", "content": "p"}]}))
        chosen.append(d.record.chosen)
    return chosen, {c.backend: c for c in d.candidates}


async def test_route_target_holds_the_share_on_lower_bounds():
    """mid predicts 0.9 / 0.95 = 0.947 of strong: enough for 0.9 of the best on every
    request when the predictions are taken as exact (``uncertainty_z: 0``). With mid's
    estimate uncertain (sd 0.1), its bound 0.8 is 0.85 of strong's 0.94, so about a third of
    the requests must go to strong for the route to keep 0.9 of the summed bounds."""
    sd = {"strong": 0.01, "mid": 0.1}
    chosen, cands = await _choices("{route_target: 0.9, uncertainty_z: 0}", sd)
    assert set(chosen) == {"mid"} and cands["mid"].quality_bound == pytest.approx(0.9)
    chosen, cands = await _choices("{route_target: 0.9, uncertainty_z: 1}", sd)
    strong = chosen.count("strong")
    assert 0.9 * (strong * 0.94 + (60 - strong) * 0.8) >= 0.9 * 0.9 * 60 * 0.94 - 0.1  # the held share
    assert 14 <= strong <= 26  # (0.846 - 0.8) / (0.94 - 0.8) = 1/3 of 60, drawn
    assert cands["mid"].quality_bound == pytest.approx(0.8) and cands["strong"].quality_bound == pytest.approx(0.94)
    assert cands["mid"].quality_sd == 0.1 and cands["mid"].predicted_quality == 0.9  # the estimate itself is kept
    chosen, _ = await _choices("{route_target: 0.9}", {})  # no sd known: the estimate is the bound
    assert set(chosen) == {"mid"}
    chosen, cands = await _choices("{target: 0.9}", sd)  # per-request bars test the estimate
    assert set(chosen) == {"mid"} and cands["mid"].quality_bound is None


def test_uncertainty_z_is_for_route_target_only():
    from router.policy.loader import PolicyError

    with pytest.raises(PolicyError, match="uncertainty_z"):
        parse_policy(POLICY.replace("BAR", "{target: 0.9, uncertainty_z: 1}"))
    with pytest.raises(PolicyError, match="uncertainty_z"):
        parse_policy(POLICY.replace("BAR", "{route_target: 0.9, uncertainty_z: -1}"))
    bar = parse_policy(POLICY.replace("BAR", "{route_target: 0.9}")).policy.routes[0].quality_bar
    assert (bar.z, bar.allocation_in_force) == (DEFAULT_UNCERTAINTY_Z, DEFAULT_ALLOCATION)
    assert parse_policy(POLICY.replace("BAR", "{target: 0.9}")).policy.routes[0].quality_bar.allocation_in_force is None


def test_every_problem_of_a_bar_is_reported_at_once():
    from router.policy.loader import PolicyError

    with pytest.raises(PolicyError) as exc:
        parse_policy(POLICY.replace("BAR", "{target: 0.9, window: 10, uncertainty_z: 1}"))
    assert "'window' and 'uncertainty_z' apply to a 'route_target' bar only" in str(exc.value)
    with pytest.raises(PolicyError) as exc:
        parse_policy(POLICY.replace("BAR", "{min_quality: 0.5, window: 10, uncertainty_z: 1, allocation: share}"))
    assert "'window', 'uncertainty_z' and 'allocation' apply to a 'route_target' bar only" in str(exc.value)
    with pytest.raises(PolicyError) as exc:
        parse_policy(POLICY.replace("BAR", "{route_target: 0.9, allocation: greedy}"))
    assert "allocation" in str(exc.value) and "'lagrangian' or 'share'" in str(exc.value)
    with pytest.raises(PolicyError) as exc:
        parse_policy(POLICY.replace("BAR", "{window: 10}"))
    assert "set exactly one of" in str(exc.value) and "'window' applies to" in str(exc.value)


async def test_an_unbounded_price_picks_the_best_and_records_null():
    """A step dearer than the controller's last bucket (here 1e-6 of quality for 200 USD)
    still counts when the window needs it: the price is then unbounded, the request takes
    its best candidate, and the record stays valid JSON (no Infinity)."""
    import json

    policy = parse_policy("""version: 1
backends:
  - {name: strong, kind: fake, model: strong, pricing: {per_request: 200}}
  - {name: weak, kind: fake, model: weak, pricing: {per_request: 0.0001}}
routes:
  - {name: auto, backends: [strong, weak], quality_bar: {route_target: 1.0, uncertainty_z: 0}}
""")
    router = Router(policy, _Table({"p": {"strong": 0.9, "weak": 0.899999}}), LiveState())
    d = await router.decide(RoutingRequest("chat", {"model": "auto", "messages": [{"role": "user", "content": "p"}]}))
    assert d.record.chosen == "strong" and d.record.signals["route_wtp_usd"] is None
    json.dumps(d.record.signals, allow_nan=False)


def test_an_overflowing_step_is_the_dearest_not_an_error():
    """From a break-it pass: a step whose cost per unit of quality overflows to inf raised
    OverflowError in the bucket (a 500 on every request of the route)."""
    ctl = RouteTarget(0.9, allocation="lagrangian")
    drawn = ctl.add([(1e-4, 0.5), (1.7e308, 0.99)])  # only the overflowing step reaches 0.9
    assert ctl.level == float("inf") and drawn in (float("inf"), ctl._edge(BUCKETS - 1))  # or the draw's lower side
    assert ctl._bucket_of(float("inf"), 0.0) == BUCKETS - 1 and ctl._bucket_of(float("nan"), 0.0) == 0


def test_prices_that_could_overflow_are_refused():
    from router.policy.loader import PolicyError

    with pytest.raises(PolicyError, match="less than or equal to 1000000"):
        parse_policy(POLICY.replace("per_request: 0.01", "per_request: 1.0e+308").replace("BAR", "{route_target: 0.9}"))


def test_feedback_spends_a_surplus_when_traffic_drifts_the_other_way(monkeypatch):
    """The target is held, not exceeded at the route's expense: without feedback (or with
    one that keeps a surplus, as earlier versions did) the run holds 0.99 of its best for a
    0.9 target and sends 81% of its requests strong; spending the surplus brings it to
    about 0.95 with 64% strong."""
    overall, _, strong = _drift(4.0, monkeypatch, worse=True, target=0.9, seed=1)
    blind, _, blind_strong = _drift(0.0, monkeypatch, worse=True, target=0.9, seed=1)
    assert blind > 0.98 and blind_strong > 0.8
    assert 0.9 <= overall < 0.96 and strong < blind_strong - 0.1
