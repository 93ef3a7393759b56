"""``python -m deploy.local``: the production-like stack without containers (private
PostgreSQL and Redis, two gateways each with its own journal, a two-replica fake vLLM pool),
and the operator's acceptance run against it with curl alone: a tenant and a key with a
$0.01 budget created through the admin API, traffic through both gateways, spend and budget
left read back, the same figures in /metrics and on the dashboard (admin key as Bearer);
then ``down`` stops everything it started."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from bench.fault_env import free_port, unavailable

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "HF_HUB_OFFLINE": "1"}

pytestmark = pytest.mark.skipif(bool(unavailable()) or not shutil.which("redis-server") or not shutil.which("curl"),
                                reason=f"needs PostgreSQL server binaries, redis-server and curl ({unavailable()})")


def _local(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "deploy.local", *args], cwd=REPO, env=ENV, capture_output=True,
                          text=True, timeout=timeout)


def curl(method: str, url: str, key: str, body: dict | None = None) -> tuple[int, dict[str, str], dict]:
    """``curl -sS -X METHOD -H 'Authorization: Bearer KEY' [-d JSON] URL``: status, headers, JSON body."""
    with tempfile.TemporaryDirectory() as tmp:
        head, payload = Path(tmp) / "head", Path(tmp) / "body"
        cmd = ["curl", "-sS", "-X", method, url, "-H", f"Authorization: Bearer {key}", "-D", str(head),
               "-o", str(payload)]
        if body is not None:
            cmd += ["-H", "content-type: application/json", "-d", json.dumps(body)]
        subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=True)
        lines = head.read_text().strip().splitlines()
        text = payload.read_text()
    headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    return int(lines[0].split()[1]), {k.lower(): v for k, v in headers.items()}, json.loads(text or "null")


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


def _metric(text: str, name: str, tenant: str) -> float:
    (line,) = [x for x in text.splitlines() if x.startswith(name + "{") and f'tenant="{tenant}"' in x]
    return float(line.rsplit(" ", 1)[1])


@pytest.fixture(scope="module")
def stack():
    state = Path(tempfile.mkdtemp(prefix="mixroute-local-"))
    state.chmod(0o755)  # as root, PostgreSQL runs as the postgres user and must reach its data folder
    ports = [free_port() for _ in range(6)]
    up = _local("up", "--state-dir", str(state), "--pg-port", str(ports[0]), "--redis-port", str(ports[1]),
                "--gateway-ports", f"{ports[2]},{ports[3]}", "--replica-ports", f"{ports[4]},{ports[5]}")
    recorded = state / "stack.json"
    record = json.loads(recorded.read_text()) if recorded.exists() else {"pids": {}}
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        yield state, record, up.stdout
    finally:
        if recorded.exists():
            down = _local("down", "--state-dir", str(state), "--purge")
            assert down.returncode == 0, down.stderr
            assert not state.exists()  # --purge
        shutil.rmtree(state, ignore_errors=True)
        for name, pid in record["pids"].items():
            for _ in range(100):
                if not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split(") ")[1][:1]:
                    break
                time.sleep(0.1)
            else:
                pytest.fail(f"{name} (pid {pid}) still runs after down")
        for port in ports:
            with socket.socket() as sock:
                assert sock.connect_ex(("127.0.0.1", port)) != 0, f"port {port} still answers after down"


def test_up_starts_private_services_two_gateways_and_a_pool(stack):
    state, record, out = stack
    assert set(record["started"]) == {"postgres", "redis"}
    assert {"gateway-1", "gateway-2", "fake-vllm-0", "fake-vllm-1", "redis"} <= set(record["pids"])
    for name in ("gateway-1", "gateway-2", "fake-vllm-0", "fake-vllm-1"):
        assert record["urls"][name] in out
    journals = {_environ(record["pids"][g]).get("MIXROUTE_STORE_JOURNAL_PATH") for g in ("gateway-1", "gateway-2")}
    assert None not in journals and len(journals) == 2  # each gateway its own spill journal
    logs = [(state / f"gateway-{i}" / "gateway.log").read_text() for i in (1, 2)]
    assert all("Traceback" not in log for log in logs)
    again = _local("up", "--state-dir", str(state))
    assert again.returncode == 1 and "is running" in again.stderr


def test_acceptance_with_curl_across_two_gateways(stack):
    state, record, _ = stack
    admin = (state / "admin_key").read_text().strip()
    g1, g2 = record["urls"]["gateway-1"], record["urls"]["gateway-2"]
    status, _, tenant = curl("POST", g1 + "/v1/admin/tenants", admin, {"name": "acme", "budget_usd": 0.01})
    assert status == 201 and tenant["left_usd"] == 0.01, tenant
    status, _, created = curl("POST", g1 + "/v1/admin/keys", admin, {"tenant": "acme", "budget_usd": 0.01})
    assert status == 201, created
    key, key_id = created["key"], created["key_id"]

    costs = []
    for gw in (g1, g2, g1, g2):
        status, headers, answer = curl("POST", gw + "/v1/chat/completions", key, {
            "model": "self-hosted", "messages": [{"role": "user", "content": "Say hello to the operators."}]})
        assert status == 200 and answer["choices"][0]["message"]["content"], answer
        assert headers["x-mixroute-backend"] == "llama-3.1-8b-instruct"
        costs.append(float(headers["x-mixroute-cost-usd"]))
    spent = sum(costs)
    assert spent > 0

    deadline = time.monotonic() + 15
    while True:
        _, _, view = curl("GET", g2 + f"/v1/admin/keys/{key_id}", admin)
        if view["spent_usd"] >= spent * (1 - 1e-6) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert view["spent_usd"] == pytest.approx(spent, rel=1e-6)
    assert view["left_usd"] == pytest.approx(0.01 - spent, rel=1e-6)
    _, _, tenant = curl("GET", g1 + "/v1/admin/tenants/acme", admin)
    assert tenant["spent_usd"] == pytest.approx(spent, rel=1e-6)

    time.sleep(5.2)  # the budget gauges are re-read from the store at most every 5 s
    for gw in (g1, g2):
        text = subprocess.run(["curl", "-sS", gw + "/metrics"], capture_output=True, text=True, check=True).stdout
        assert _metric(text, "mixroute_tenant_spent_usd", "acme") == pytest.approx(spent, rel=1e-6)
        assert _metric(text, "mixroute_tenant_budget_left_usd", "acme") == pytest.approx(0.01 - spent, rel=1e-6)
        status, _, dash = curl("GET", gw + "/dashboard/api/summary", admin)
        assert status == 200, dash
        (row,) = [b for b in dash["budgets"] if b["tenant"] == "acme"]
        assert row["spent_usd"] == pytest.approx(spent, rel=1e-6)
        assert row["left_usd"] == pytest.approx(0.01 - spent, rel=1e-6)
        assert dash["totals"]["spend_usd"] == pytest.approx(spent, rel=1e-6)
