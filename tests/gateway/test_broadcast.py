"""Two gateway replicas on one Redis switch policy together: a reload on one is announced
and the other re-reads its (shared) policy file."""

from __future__ import annotations

import os
import shutil
import time

import httpx
import pytest

from tests.conftest import redis_test_prefix
from tests.gateway.conftest import start_gateway

REDIS_URL = os.environ.get("MIXROUTE_TEST_REDIS_URL")
POLICY = """version: 1
backends:
  - {name: one, kind: fake, model: model-one, quality: 0.9}
routes:
  - {name: auto, backends: [one]}
"""


@pytest.mark.skipif(not REDIS_URL, reason="MIXROUTE_TEST_REDIS_URL is not set (e.g. redis://127.0.0.1:6379/0)")
def test_policy_switch_reaches_the_other_replica(tmp_path):
    prefix = redis_test_prefix()
    shared = tmp_path / "shared"
    shared.mkdir()
    # Replica A watches the file; replica B does not, so only the broadcast can move B.
    a = start_gateway(shared, POLICY, redis_url=REDIS_URL, redis_prefix=prefix, policy_watch=True)
    b = start_gateway(shared, POLICY, redis_url=REDIS_URL, redis_prefix=prefix, policy_watch=False,
                      database_url=f"sqlite:///{tmp_path}/b.db")
    try:
        def hashes():
            return {httpx.get(gw.url + "/readyz").json()["policy_hash"] for gw in (a, b)}

        before = hashes()
        assert len(before) == 1
        time.sleep(0.5)
        (shared / "policy.yaml").write_text(POLICY.replace("quality: 0.9", "quality: 0.8"))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (len(hashes()) != 1 or hashes() == before):
            time.sleep(0.1)
        after = hashes()
        assert len(after) == 1 and after != before
    finally:
        a.stop()
        b.stop()


class _Holder:
    """The two members of ``PolicyHolder`` the listener uses."""

    def __init__(self):
        self.current = None
        self.reloads = 0

    async def reload(self):
        self.reloads += 1


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(not shutil.which("redis-server"), reason="redis-server is not installed (it starts a Redis of its own)")
def test_listener_backs_off_logs_once_and_recovers(caplog):
    """Redis down at start: one WARNING for the whole outage (it logged one every second),
    waits that grow; when a Redis appears on that port it subscribes again (one INFO) and
    announcements reach the holder."""
    import asyncio
    import logging
    import subprocess

    from gateway.broadcast import PolicyBroadcast

    port = _free_port()

    async def scenario():
        holder = _Holder()
        b = PolicyBroadcast(f"redis://127.0.0.1:{port}/0", "mrtest", holder, retry_s=0.05, max_retry_s=0.4)
        b.start()
        await asyncio.sleep(1.5)
        failed = b.failures
        server = subprocess.Popen(["redis-server", "--port", str(port), "--save", "", "--appendonly", "no"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = asyncio.get_running_loop().time() + 10
            while b.failures and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.05)
            assert b.failures == 0, "the listener did not subscribe again"
            import redis.asyncio as aioredis

            pub = aioredis.Redis.from_url(f"redis://127.0.0.1:{port}/0")
            while holder.reloads == 0 and asyncio.get_running_loop().time() < deadline:
                await pub.publish("mrtest:policy", "a-new-hash")
                await asyncio.sleep(0.05)
            await pub.aclose()
            assert holder.reloads >= 1
        finally:
            await b.aclose()
            server.terminate()
            server.wait(10)
        return failed

    with caplog.at_level(logging.DEBUG, logger="mixroute.broadcast"):
        failed = asyncio.run(scenario())
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "listener" in r.getMessage()]
    # 1.5 s at 0.05, 0.1, 0.2, 0.4, 0.4... s: a handful of attempts, not one per 50 ms
    assert 3 <= failed <= 10, failed
    assert len(warnings) == 1 and "logged once" in warnings[0].getMessage()
    assert any(r.levelno == logging.INFO and "subscribed again" in r.getMessage() for r in caplog.records)
