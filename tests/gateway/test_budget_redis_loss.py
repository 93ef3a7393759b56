"""Budgets across Redis restarts, outages and hangs, on two real gateway processes sharing a
private Redis and PostgreSQL (the fault suite's scenarios, :mod:`bench.faults_money`): spend
stays within the budget plus what was admitted fail-open plus one request, the next request
after recovery sees the true spend, and no reservation is left holding budget."""

from __future__ import annotations

import shutil

import pytest

from bench import faults_money
from bench.fault_env import unavailable

pytestmark = [
    pytest.mark.skipif(unavailable() is not None, reason=f"no private PostgreSQL: {unavailable()}"),
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server is not installed"),
]


@pytest.mark.parametrize("scenario", [faults_money.redis_restart, faults_money.redis_restart_store_lagging,
                                      faults_money.redis_restart_in_flight,
                                      faults_money.redis_outage,
                                      faults_money.redis_hang, faults_money.stream_without_usage])
def test_budget_survives_redis_loss(scenario) -> None:
    row = scenario()
    assert row.passed, f"{row.scenario}: {row.detail} (spend {row.spend}, answered {row.answered})"
    assert row.answered > 0 and row.recorded == row.answered
