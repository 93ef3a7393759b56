"""Fixtures shared by every test package.

``data_dir``: the shared real outcome data (``MIXROUTE_DATA_DIR``, else ``../shared/data``
beside the repository); tests using it are skipped with a message when it is absent.

Redis: every test that touches the shared ``MIXROUTE_TEST_REDIS_URL`` takes its key prefix
from :func:`redis_test_prefix`, which starts with this session's own stem
(:data:`SESSION_REDIS_PREFIX`). At the end of the session the keys under that stem, and only
those, are deleted: several sessions on one server (parallel helpers, CI jobs) neither see
nor clean up one another's keys (a session that deleted every ``mrtest-*`` key wiped the
budget counters of another session's gateways mid-test).
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

DATA_DIR = Path(os.environ.get("MIXROUTE_DATA_DIR") or Path(__file__).resolve().parents[1] / ".." / "shared" / "data")


#: The stem of every Redis key prefix of this test session (process): ``mrtest-<pid>-<random>``.
SESSION_REDIS_PREFIX = f"mrtest-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def redis_test_prefix() -> str:
    """A Redis key prefix of its own for one test (or one group of gateways sharing state),
    under this session's stem."""
    return f"{SESSION_REDIS_PREFIX}-{uuid.uuid4().hex[:8]}"


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
        keys = list(client.scan_iter(match=f"{SESSION_REDIS_PREFIX}-*", count=1000))
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
