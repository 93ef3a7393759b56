"""Adapter versions over HTTP: ``mixroute adapters promote|rollback`` switch a running
gateway's version within a poll, without dropping a request; every decision records the
version that made it; a version that does not exist is one line, exit 1, nothing changed."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timezone

import httpx
import pytest
from typer.testing import CliRunner

from gateway.cli import app
from router.learning.baked import OUTCOMES_FILE, Baked
from router.learning.memory import Tally
from router.learning.versions import Versions, VersionInfo
from tests.gateway.conftest import start_gateway, wait_row

POLICY = """version: 1
backends:
  - {name: cheap, kind: fake, model: cheap-model, quality: 0.9, pricing: {input_per_1m: 0.1, output_per_1m: 0.1}}
  - {name: strong, kind: fake, model: strong-model, quality: 0.85, pricing: {input_per_1m: 5, output_per_1m: 10}}
routes:
  - {name: auto, backends: [cheap, strong], quality_bar: {min_quality: 0.7}}
learning: {prior_weight: 2}
"""


def _bad_cheap(folder) -> None:
    """An outcome correction of 20 observations of ``cheap`` scoring 0 against an estimate of 0.9."""
    Baked(datetime.now(timezone.utc), {"cheap": Tally(20.0, 20.0, -18.0, 0.0)}).save(folder / OUTCOMES_FILE, 168)


def _route(gw) -> dict:
    resp = httpx.post(gw.v1 + "/route", json={"messages": [{"role": "user", "content": "which?"}]}, timeout=10)
    assert resp.status_code == 200, resp.text
    return resp.json()


def _until(gw, version: str, timeout: float = 10.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        got = _route(gw)
        if got["adapter_version"] == version or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def _cli(*args: str):
    return CliRunner().invoke(app, ["adapters", *args])


def _chat(gw, text: str) -> httpx.Response:
    return httpx.post(gw.v1 + "/chat/completions", json={"model": "auto", "messages": [{"role": "user",
                                                                                       "content": text}]},
                      timeout=30)


def test_promote_rollback_hot_reload_and_a_missing_version(tmp_path) -> None:
    folder = tmp_path / "adapters"
    versions = Versions(folder)
    versions.create(VersionInfo(version="v2", created_at="2026-12-06T01:00:00+00:00"), _bad_cheap)
    gw = start_gateway(tmp_path, POLICY, adapters_dir=folder, adapters_poll_s=0.1, learning_refresh_s=3600,
                       store_flush_interval_s=0.02)
    failures: list[str] = []
    stop = threading.Event()

    def traffic() -> None:  # requests in flight across every swap: none may fail
        i = 0
        with httpx.Client(timeout=30) as client:
            while not stop.is_set():
                r = client.post(gw.v1 + "/chat/completions",
                                json={"model": "auto", "messages": [{"role": "user", "content": f"load {i}"}]})
                if r.status_code != 200:
                    failures.append(f"{r.status_code} {r.text[:200]}")
                i += 1

    worker = threading.Thread(target=traffic)
    worker.start()
    try:
        before = _route(gw)
        assert (before["adapter_version"], before["chosen"]) == ("shipped", "cheap")
        resp = _chat(gw, "first")
        assert wait_row(gw.settings.database_url, "decisions",
                        resp.headers["x-mixroute-request-id"])["adapter_version"] == "shipped"

        res = _cli("promote", "v2", "--dir", str(folder))
        assert res.exit_code == 0, res.output
        after = _until(gw, "v2")
        assert after["adapter_version"] == "v2" and after["chosen"] == "strong", after
        cheap = next(c for c in after["candidates"] if c["backend"] == "cheap")
        assert cheap["predicted_quality"] == pytest.approx(0.9 - 18.0 / 20.0 * 20.0 / 22.0, abs=1e-4)
        resp = _chat(gw, "second")
        assert resp.headers["x-mixroute-backend"] == "strong"
        assert wait_row(gw.settings.database_url, "decisions",
                        resp.headers["x-mixroute-request-id"])["adapter_version"] == "v2"

        res = _cli("promote", "v-does-not-exist", "--dir", str(folder))
        assert res.exit_code == 1
        lines = res.output.strip().splitlines()
        assert len(lines) == 1 and "no adapter version 'v-does-not-exist'" in lines[0], res.output
        assert versions.active().version == "v2"
        time.sleep(0.3)  # several polls: the live router is untouched
        assert (_route(gw)["adapter_version"], _route(gw)["chosen"]) == ("v2", "strong")

        res = _cli("rollback", "--dir", str(folder))
        assert res.exit_code == 0 and "v2 -> shipped" in res.output, res.output
        back = _until(gw, "shipped")
        assert back["chosen"] == "cheap", back
    finally:
        stop.set()
        worker.join(timeout=30)
        gw.stop()
    assert not failures, failures[:3]
    res = _cli("events", "--dir", str(folder), "--json")
    assert res.exit_code == 0
    assert [line.count('"event": "promote"') + 2 * line.count('"event": "rollback"')
            for line in res.output.strip().splitlines()] == [1, 2]
    listed = _cli("list", "--dir", str(folder))
    assert listed.exit_code == 0 and "* shipped" in listed.output and "  v2" in listed.output, listed.output


def test_a_gateway_starts_on_the_active_version_and_skips_a_broken_one(tmp_path) -> None:
    folder = tmp_path / "adapters"
    versions = Versions(folder)
    versions.create(VersionInfo(version="v2", created_at="2026-12-06T01:00:00+00:00"), _bad_cheap)
    versions.create(VersionInfo(version="v3", created_at="2026-12-06T02:00:00+00:00"),
                    lambda f: (f / OUTCOMES_FILE).write_text("{not json"))
    versions.promote("v2")
    gw = start_gateway(tmp_path, POLICY, adapters_dir=folder, adapters_poll_s=0.1, learning_refresh_s=3600)
    try:
        first = _route(gw)
        assert (first["adapter_version"], first["chosen"]) == ("v2", "strong"), first
        res = _cli("promote", "v3", "--dir", str(folder))  # exists, but cannot be loaded: refused
        assert res.exit_code == 1 and res.output.count("\n") == 1 and "cannot be loaded" in res.output, res.output
        versions.promote("v3")  # as if its folder were damaged after its promotion
        time.sleep(0.4)
        still = _route(gw)
        assert (still["adapter_version"], still["chosen"]) == ("v2", "strong"), still
    finally:
        gw.stop()


def test_a_policy_reload_keeps_the_adapter_version(tmp_path) -> None:
    folder = tmp_path / "adapters"
    versions = Versions(folder)
    versions.create(VersionInfo(version="v2", created_at="2026-12-06T01:00:00+00:00"), _bad_cheap)
    versions.promote("v2")
    gw = start_gateway(tmp_path, POLICY, adapters_dir=folder, adapters_poll_s=0.1, policy_watch=True)
    try:
        before = _route(gw)
        assert (before["adapter_version"], before["chosen"]) == ("v2", "strong")
        (tmp_path / "policy.yaml").write_text(POLICY.replace("min_quality: 0.7", "min_quality: 0.75"))
        deadline = time.monotonic() + 15
        while _route(gw)["policy_hash"] == before["policy_hash"] and time.monotonic() < deadline:
            time.sleep(0.1)
        after = _route(gw)
        assert after["policy_hash"] != before["policy_hash"] and after["quality_bar"] == 0.75
        assert (after["adapter_version"], after["chosen"]) == ("v2", "strong"), after
    finally:
        gw.stop()
