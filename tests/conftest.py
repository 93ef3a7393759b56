"""Fixtures shared by every test package.

``data_dir``: the shared real outcome data (``MIXROUTE_DATA_DIR``, else ``../shared/data``
beside the repository); tests using it are skipped with a message when it is absent.

At the end of the session every Redis key the tests made (prefix ``mrtest-``) is deleted
from ``MIXROUTE_TEST_REDIS_URL``, so test runs leave the shared server as they found it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

DATA_DIR = Path(os.environ.get("MIXROUTE_DATA_DIR") or Path(__file__).resolve().parents[1] / ".." / "shared" / "data")


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not (DATA_DIR / "README.md").is_file():
        pytest.skip(f"shared outcome data not found at {DATA_DIR} (set MIXROUTE_DATA_DIR)")
    return DATA_DIR.resolve()


@pytest.fixture(scope="session", autouse=True)
def _clean_test_redis_keys():
    yield
    url = os.environ.get("MIXROUTE_TEST_REDIS_URL")
    if not url:
        return
    try:
        import redis
    except ImportError:
        return
    client = redis.Redis.from_url(url)
    try:
        keys = list(client.scan_iter(match="mrtest-*", count=1000))
        for i in range(0, len(keys), 500):
            client.delete(*keys[i:i + 500])
    except redis.RedisError:
        pass  # a server gone at teardown is not a test failure
    finally:
        client.close()


@pytest.fixture
def free_port() -> int:
    """A loopback TCP port nothing listens on now: tests that start (or only configure) a
    server must not depend on port 8000 being free on the machine."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
