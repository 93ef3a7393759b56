"""The runaway-cost check on a controlled clock: the EWMA baseline, firing at factor x the
baseline, the hold time, no learning while fired, and the policy block's validation."""

from __future__ import annotations

import pytest

from gateway.limits.runaway import RunawayWatch
from router.policy import PolicyError, parse_policy
from router.policy.runaway_config import RunawayConfig

POLICY = """version: 1
backends:
  - {name: big, kind: fake, model: big-model, quality: 0.9}
routes:
  - {name: auto, backends: [big]}
"""


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _watch(**cfg):
    clock = Clock()
    watch = RunawayWatch(clock)
    config = RunawayConfig(window_s=10, baseline_windows=5, warmup_windows=3, factor=5, min_usd_per_min=0,
                           hold_s=30, **cfg)
    return clock, watch, watch.check(config)


def _spend(clock, check, seconds: float, usd_per_s: float, tenant: str = "acme", step: float = 1.0) -> None:
    end = clock.t + seconds
    while clock.t < end:
        check.observe(tenant, "auto", usd_per_s * step)
        clock.t += step


def test_fires_at_ten_times_the_baseline_and_not_at_twice():
    clock, watch, check = _watch()
    _spend(clock, check, 60, 0.001)                      # six windows at the baseline
    assert not watch.active("tenant", "acme")
    _spend(clock, check, 10, 0.002)                      # twice the baseline: under factor 5
    assert not watch.active("tenant", "acme")
    _spend(clock, check, 10, 0.010)                      # ten times, for one window
    assert watch.active("tenant", "acme") and watch.active("route", "auto")
    (event, *_) = [e for e in watch.recent_events() if e["scope"] == "tenant"]
    assert event["action"] == "alert" and event["name"] == "acme"
    assert event["rate_usd_per_min"] > 5 * event["baseline_usd_per_min"] > 0
    assert watch.fired[("tenant", "acme", "alert")] == 1


def test_holds_then_clears_and_the_baseline_did_not_learn_the_runaway():
    clock, watch, check = _watch()
    _spend(clock, check, 60, 0.001)
    baseline = {(s, n): b for s, n, _, b, _ in watch.rates()}[("tenant", "acme")]
    _spend(clock, check, 40, 0.010)                      # a long runaway
    assert watch.active("tenant", "acme")
    assert {(s, n): b for s, n, _, b, _ in watch.rates()}[("tenant", "acme")] == pytest.approx(baseline)
    _spend(clock, check, 20, 0.001)                      # back to normal, within hold_s
    assert watch.active("tenant", "acme")
    _spend(clock, check, 40, 0.001)
    assert not watch.active("tenant", "acme")
    assert watch.recent_events()[0]["action"] == "clear"


def test_no_firing_before_warmup_and_under_the_floor():
    clock, watch, check = _watch()
    _spend(clock, check, 15, 0.001)
    _spend(clock, check, 5, 0.1)                         # huge, but only one window of history
    assert not watch.active("tenant", "acme")
    floor = RunawayConfig(window_s=10, baseline_windows=5, warmup_windows=3, factor=5, min_usd_per_min=100)
    clock2, watch2 = Clock(), None
    watch2 = RunawayWatch(clock2)
    check2 = watch2.check(floor)
    _spend(clock2, check2, 60, 0.001)
    _spend(clock2, check2, 5, 0.02)
    assert not watch2.active("tenant", "acme")           # 1.2 USD/min < the 100 USD/min floor


def test_idle_windows_decay_the_baseline():
    clock, watch, check = _watch()
    _spend(clock, check, 60, 0.001)
    before = {(s, n): b for s, n, _, b, _ in watch.rates()}[("tenant", "acme")]
    clock.t += 100                                       # ten idle windows
    check.observe("acme", "auto", 0.0)
    after = {(s, n): b for s, n, _, b, _ in watch.rates()}[("tenant", "acme")]
    assert after == pytest.approx(before * (1 - 2 / 6) ** 10, rel=0.35)


def test_throttle_limits_only_for_the_fired_tenant():
    clock, watch, check = _watch(action="throttle", throttle_rpm=3, scopes=["tenant"])
    for _ in range(60):
        check.observe("acme", "auto", 0.001)
        check.observe("other", "auto", 0.001)
        clock.t += 1
    _spend(clock, check, 10, 0.02, tenant="acme")
    (limits,) = check.throttles("acme", "auto")
    assert limits.subject == "runaway:tenant:acme" and limits.rpm == 3
    assert check.throttles("other", "auto") == []


def test_a_changed_block_restarts_the_tracks():
    clock, watch, check = _watch()
    _spend(clock, check, 30, 0.001)
    assert watch.rates()
    watch.check(RunawayConfig(window_s=5))
    assert watch.rates() == []
    assert watch.check(RunawayConfig(action="off")) is None


@pytest.mark.parametrize(("block", "problem"), [
    ("runaway: {action: throttle}", "policy.yaml:6 runaway: 'action: throttle' needs 'throttle_rpm'"),
    ("runaway: {action: alert, throttle_rpm: 5}", "policy.yaml:6 runaway: 'throttle_rpm' applies only with"),
    ("runaway: {factor: 1}", "policy.yaml:6 runaway.factor: "),
    ("runaway: {windw_s: 5}", "policy.yaml:6 runaway.windw_s: unknown key 'windw_s'"),
    ("runaway: {scopes: [key]}", "policy.yaml:6 runaway.scopes[0]: "),
])
def test_bad_runaway_blocks_are_reported_at_their_line(block, problem):
    with pytest.raises(PolicyError) as info:
        parse_policy(POLICY + block + "\n", source="policy.yaml")
    assert str(info.value).startswith(problem), str(info.value)


def test_a_good_block_loads():
    loaded = parse_policy(POLICY + "runaway: {action: throttle, throttle_rpm: 6, factor: 10, window_s: 60}\n")
    assert loaded.policy.runaway.throttle_rpm == 6
