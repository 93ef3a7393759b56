"""Two gateway replicas on one Redis switch policy together: a reload on one is announced
and the other re-reads its (shared) policy file."""

from __future__ import annotations

import os
import time
import uuid

import httpx
import pytest

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
    prefix = f"mrtest-{uuid.uuid4().hex[:8]}"
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
