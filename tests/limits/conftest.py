"""``limiter``: the limiter contract's subject, run once in process and once against a
real Redis server (``MIXROUTE_TEST_REDIS_URL``; skipped with a reason when unset)."""

from __future__ import annotations

import os

import pytest

from gateway.limits.memory import MemoryLimiter
from tests.conftest import redis_test_prefix

REDIS_URL = os.environ.get("MIXROUTE_TEST_REDIS_URL")


@pytest.fixture(params=["memory", "redis"])
async def limiter(request):
    if request.param == "memory":
        yield MemoryLimiter()
        return
    if not REDIS_URL:
        pytest.skip("MIXROUTE_TEST_REDIS_URL is not set (e.g. redis://127.0.0.1:6379/0)")
    from gateway.limits.redis import RedisLimiter

    lim = RedisLimiter(REDIS_URL, prefix=redis_test_prefix(), timeout_s=5.0)
    yield lim
    await lim.aclose()
