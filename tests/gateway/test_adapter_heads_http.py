"""A version with its own classifier heads, hot-swapped on a gateway that runs the real
classifier: requests in flight across the swaps all succeed, each decision names the heads
that read its prompt, and a rollback returns to the shipped heads without reloading them."""

from __future__ import annotations

import json
import shutil
import threading
import time

import httpx
import pytest
from typer.testing import CliRunner

from gateway.cli import app
from router.learning.versions import HEADS_DIR, Versions, VersionInfo
from tests.gateway.conftest import start_gateway

pytest.importorskip("torch")

POLICY = """version: 1
backends:
  - {name: cheap, kind: fake, model: cheap-model, quality: 0.9, pricing: {input_per_1m: 0.1, output_per_1m: 0.1}}
  - {name: strong, kind: fake, model: strong-model, quality: 0.85, pricing: {input_per_1m: 5, output_per_1m: 10}}
routes:
  - {name: auto, backends: [cheap, strong], quality_bar: {min_quality: 0.7}}
"""


def _own_heads(folder) -> None:
    """The shipped heads, the domain head's version renumbered (what the decisions show)."""
    from router.classify import default_adapters_dir

    shutil.copytree(default_adapters_dir(), folder / HEADS_DIR, ignore=shutil.ignore_patterns("__*"))
    config = folder / HEADS_DIR / "domain" / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "version": 7}))


def _until(gw, version: str, timeout: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        got = httpx.post(gw.v1 + "/route", json={"messages": [{"role": "user", "content": "Prove 2+2=4."}]},
                         timeout=30).json()
        if got["adapter_version"] == version or time.monotonic() > deadline:
            return got
        time.sleep(0.1)


def test_heads_swap_under_load(tmp_path) -> None:
    folder = tmp_path / "adapters"
    Versions(folder).create(VersionInfo(version="v-heads", created_at="2026-12-06T01:00:00+00:00"), _own_heads)
    gw = start_gateway(tmp_path, POLICY, classifier="on", adapters_dir=folder, adapters_poll_s=0.1)
    failures: list[str] = []
    stop = threading.Event()

    def traffic() -> None:
        with httpx.Client(timeout=60) as client:
            i = 0
            while not stop.is_set():
                r = client.post(gw.v1 + "/chat/completions",
                                json={"model": "auto", "messages": [{"role": "user", "content": f"q {i}"}]})
                if r.status_code != 200:
                    failures.append(f"{r.status_code} {r.text[:200]}")
                i += 1

    worker = threading.Thread(target=traffic)
    worker.start()
    try:
        first = _until(gw, "shipped")
        assert "domain@1" in first["signals"]["classifier_heads"]
        assert CliRunner().invoke(app, ["adapters", "promote", "v-heads", "--dir", str(folder)]).exit_code == 0
        swapped = _until(gw, "v-heads")
        assert swapped["adapter_version"] == "v-heads", swapped
        assert "domain@7" in swapped["signals"]["classifier_heads"]
        assert CliRunner().invoke(app, ["adapters", "rollback", "--dir", str(folder)]).exit_code == 0
        back = _until(gw, "shipped")
        assert "domain@1" in back["signals"]["classifier_heads"]
    finally:
        stop.set()
        worker.join(timeout=60)
        gw.stop()
    assert not failures, failures[:3]
