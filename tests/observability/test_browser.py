"""The dashboard in headless Chromium after real traffic: every chart has data points, the
savings figure matches the API (itself checked against the store in test_dashboard), and a
screenshot is saved under the test's temporary folder. Skipped without Chromium
(Debian: ``apt-get install chromium``)."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile

import httpx
import pytest

from tests.observability.conftest import chat, start_gateway, wait_row

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed")
CHARTS = {"chart-spend", "chart-mix", "chart-savings", "chart-quality", "chart-prefix", "chart-ttft", "chart-itl"}


def chromium(*args: str, timeout: float = 60) -> str:
    with tempfile.TemporaryDirectory() as profile:
        out = subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", f"--user-data-dir={profile}", "--window-size=1400,1900",
             "--virtual-time-budget=10000", *args], capture_output=True, text=True, timeout=timeout)
    return out.stdout


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    gw = start_gateway(tmp_path_factory.mktemp("browser"))
    last = None
    for i, (model, stream) in enumerate([("auto", False), ("auto", True), ("best", True), ("self-hosted", False)]):
        last = chat(gw, f"Question {i}", model=model, stream=stream)
        r = httpx.post(gw.v1 + "/feedback", json={"request_id": last.headers["x-mixroute-request-id"], "score": 1.0})
        assert r.status_code == 202
    wait_row(gw.settings.database_url, "feedback", last.headers["x-mixroute-request-id"])
    wait_row(gw.settings.database_url, "outcomes", last.headers["x-mixroute-request-id"])
    yield gw
    gw.stop()


def test_every_chart_has_points_and_savings_match(gw, tmp_path):
    dom = chromium("--dump-dom", gw.url + "/dashboard")
    points = {m[0]: int(m[1]) for m in re.findall(r'<canvas id="(chart-[a-z]+)"[^>]*data-points="(\d+)"', dom)}
    assert set(points) == CHARTS, dom[:2000]
    assert all(n > 0 for n in points.values()), points
    assert re.search(r'<p id="adapters-active"[^>]*>live: shipped</p>', dom), "adapter versions card not filled"
    shown = re.search(r'data-kpi="Saved vs strongest model" data-value="([^"]+)"', dom)
    api = httpx.get(gw.url + "/dashboard/api/summary").json()
    assert shown and float(shown.group(1)) == pytest.approx(api["savings"]["saved_vs_strongest_usd"])
    shot = tmp_path / "dashboard.png"
    chromium(f"--screenshot={shot}", gw.url + "/dashboard")
    assert shot.stat().st_size > 10_000
