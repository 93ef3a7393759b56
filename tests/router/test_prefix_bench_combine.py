"""bench/prefix_cache.py: several seeds combine into medians, on which the targets are checked."""

import pytest

from bench.prefix_cache import Params, combine, summarise, workload


def _rows(rr: float, mr: float, off: float = 0.01, on: float = 0.85) -> list[dict]:
    def row(scenario, strategy, hit, p90):
        return {"scenario": scenario, "strategy": strategy, "hit_rate": hit, "ttft_p90_s": p90, "client_ttft_p90_s": p90}

    return [row("tenants", "round-robin", rr, 1.0), row("tenants", "least-loaded", 0.7, 0.4),
            row("tenants", "mixroute", mr, 0.2), row("volatile", "rewrite-off", off, 0.7),
            row("volatile", "rewrite-on", on, 0.3)]


def _report(seed, rr, mr):
    rows = _rows(rr, mr)
    return {"params": {"seed": seed}, "results": [{**r, "seed": seed} for r in rows], "summary": summarise(rows)}


def test_one_seed_is_passed_through():
    r = _report(7, 0.3, 0.84)
    assert combine([r]) is r
    assert r["summary"]["hit_rate_vs_round_robin"] == 0.84 / 0.3
    assert r["summary"]["targets_met"]["hit_rate_3x"] is False


def test_targets_are_checked_on_the_medians():
    out = combine([_report(7, 0.30, 0.84), _report(8, 0.25, 0.86), _report(9, 0.26, 0.85)])
    assert out["params"]["seed"] == [7, 8, 9] and len(out["results"]) == 15
    assert out["summary"]["hit_rate_vs_round_robin"] == 0.85 / 0.26  # the middle ratio, not a ratio of medians
    assert out["summary"]["targets_met"]["hit_rate_3x"] is True
    assert set(out["per_seed"]) == {"7", "8", "9"} and out["summary"]["statistic"] == "median over 3 seeds"


def test_think_times_are_seeded_and_leave_the_prompts_alone():
    plain, paused = workload(Params(tenants=4, think_s=0.0)), workload(Params(tenants=4, think_s=0.1))
    assert [(s.tenant, s.system, s.users) for s in plain] == [(s.tenant, s.system, s.users) for s in paused]
    assert all(t == 0.0 for s in plain for t in s.thinks)
    thinks = [t for s in paused for t in s.thinks]
    assert thinks == [t for s in workload(Params(tenants=4, think_s=0.1)) for t in s.thinks]
    assert all(t > 0 for t in thinks) and 0.05 < sum(thinks) / len(thinks) < 0.2  # exponential, mean 0.1 s


@pytest.mark.parametrize("value", ["nan", "-1", "inf"])
def test_think_s_must_be_finite_and_not_negative(value, capsys):
    from bench.prefix_cache import main

    with pytest.raises(SystemExit) as exc:
        main(["--think-s", value, "--seeds", "7"])
    assert exc.value.code == 2 and "--think-s must be a finite number" in capsys.readouterr().err
