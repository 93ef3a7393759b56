"""Fault scenarios for streams, reloads and request bodies (items 5, 8 and 9 of the hardening
issue), each against a real ``mixroute serve`` process (:class:`bench.fault_env.GatewayProcess`);
run them with ``python -m bench.faults --only streams/``.

- ``streams/reload-during-long-stream``: a pricing edit while a 40 s stream and a 39 s
  non-streamed call run (a vLLM pool on :mod:`bench.fake_vllm`, and a slow ``fake``
  backend): every answer completes (``[DONE]``, no error event; 200), and is recorded.
- ``streams/url-credentials-redacted``: backends whose upstream fails and echoes the
  credentials it got (:mod:`bench.leaky_upstream`): no 502 body, stream error event or log
  line shows them.
- ``streams/slow-bodies``: half-sent bodies get 408 and are closed within the body-read
  timeout; a whole request is then served; one log line.
- ``streams/connection-limit``: connections beyond ``MIXROUTE_MAX_CONNECTIONS`` are refused
  (503), one log line, and served again once some close.
- ``streams/large-bodies``: 60 concurrent 9.4 MB bodies: the gateway's RSS grows by a bounded
  amount and a small request is answered quickly meanwhile.
"""

from __future__ import annotations

import json
import socket
import tempfile
import threading
import time
from pathlib import Path

import httpx
import sqlalchemy as sa

from bench.fault_env import GatewayProcess
from bench.faults import Row

CHAT = "/v1/chat/completions"
#: Seconds a small request may wait while large bodies arrive (streams/large-bodies).
SMALL_WAIT_S = 3.0


def _gateway(policy: str, **env: str) -> GatewayProcess:
    root = Path(tempfile.mkdtemp(prefix="mixroute-streams-"))
    (root / "policy.yaml").write_text(policy)
    gw = GatewayProcess(root / "policy.yaml", env={"MIXROUTE_DATABASE_URL": f"sqlite:///{root}/m.db", **env},
                        cwd=root)
    gw.start()
    return gw


def _outcomes(gw: GatewayProcess, status: str = "ok") -> int:
    engine = sa.create_engine(gw.env["MIXROUTE_DATABASE_URL"])
    try:
        with engine.connect() as conn:
            return conn.execute(sa.text("SELECT count(*) FROM outcomes WHERE status = :s"), {"s": status}).scalar()
    finally:
        engine.dispose()


def _stream(url: str, body: dict, out: dict, started: threading.Event, timeout: float = 90) -> None:
    events: list[str] = []
    try:
        with httpx.stream("POST", url + CHAT, json={**body, "stream": True}, timeout=timeout) as resp:
            for line in resp.iter_lines():
                if line.startswith("data: "):
                    events.append(line[6:])
                    started.set()
    except httpx.HTTPError as exc:
        events.append(f"<{type(exc).__name__}>")
    out["events"] = events


def _stream_ok(events: list[str]) -> bool:
    return bool(events) and events[-1] == "[DONE]" and not any('"error"' in e for e in events[:-1])


# --- item 5 -----------------------------------------------------------------------------------

def reload_during_long_stream() -> Row:
    from bench.fake_vllm import ReplicaModel, serve_replicas

    replica = serve_replicas(1, ReplicaModel(itl_s=1.0, output_tokens=40))

    def policy(price: float) -> str:
        return f"""version: 1
backends:
  - {{name: pool, kind: vllm, model: m, endpoints: ["{replica.urls[0]}"], options: {{metrics_interval_s: 0}},
     quality: 0.9, pricing: {{input_per_1m: {price}, output_per_1m: {price}}}}}
  - {{name: slow, kind: fake, model: s-slow, options: {{first_token_delay_s: 0.5, token_delay_s: 1.3}},
     quality: 0.9, pricing: {{input_per_1m: {price}, output_per_1m: {price}}}}}
routes:
  - {{name: auto, backends: [pool, slow]}}
"""

    gw = _gateway(policy(1.0))
    try:
        prompt = " ".join(f"w{i}" for i in range(24))
        results = {name: {} for name in ("pool", "slow", "call")}
        started = threading.Event()
        threads = [threading.Thread(target=_stream, args=(gw.url, {"model": name, "messages": [
            {"role": "user", "content": prompt}]}, results[name], started)) for name in ("pool", "slow")]

        def call() -> None:
            try:
                results["call"]["status"] = httpx.post(gw.url + CHAT, timeout=90, json={
                    "model": "pool", "max_tokens": 40, "messages": [{"role": "user", "content": prompt}]}).status_code
            except httpx.HTTPError as exc:
                results["call"]["status"] = type(exc).__name__

        threads.append(threading.Thread(target=call))
        for t in threads:
            t.start()
        started.wait(20)
        time.sleep(1.0)
        gw.policy.write_text(policy(2.0))  # the edit: both backends are rebuilt, the old ones retired
        for t in threads:
            t.join(120)
        ok = [_stream_ok(results["pool"].get("events", [])), _stream_ok(results["slow"].get("events", [])),
              results["call"].get("status") == 200]
        time.sleep(1.0)  # the outcome rows are written after the last byte
        recorded = _outcomes(gw)
        log = gw.log.read_text()
        applied = log.count(" applied (hash ") >= 2  # the start, then the edit
        drained = log.count("closed after its last call in flight")
        detail = (f"pool stream {'ok' if ok[0] else 'CUT'}, fake stream {'ok' if ok[1] else 'CUT'}, "
                  f"call {results['call'].get('status')}; edit applied: {applied}; "
                  f"old backends closed after their last call: {drained}/2")
        return Row("streams/reload-during-long-stream", sum(ok), recorded, "",
                   all(ok) and recorded == 3 and applied and drained == 2, detail)
    finally:
        gw.stop()
        replica.stop()


# --- item 8 -----------------------------------------------------------------------------------

def url_credentials_redacted() -> Row:
    import base64

    from bench.leaky_upstream import serve_in_thread

    user, password, key = "fault-user", "Fault-Pw-31337", "sk-fault-key-0042"
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    secrets = (password, token, f"{user}:{password}", key)
    leaky = serve_in_thread()
    gw = _gateway(f"""version: 1
backends:
  - {{name: pool, kind: vllm, model: leaky, endpoints: ["{leaky.v1(user, password)}"], options: {{metrics_interval_s: 0}},
     pricing: {{input_per_1m: 1, output_per_1m: 1}}}}
  - {{name: api, kind: hosted, model: openai/leaky, api_base: "http://127.0.0.1:{leaky.port}/v1", api_key: {key},
     pricing: {{input_per_1m: 1, output_per_1m: 1}}}}
routes:
  - {{name: auto, backends: [pool]}}
""")
    try:
        shown, checks = [], 0
        for model in ("pool", "api"):
            body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
            resp = httpx.post(gw.url + CHAT, json=body, timeout=30)
            checks += resp.status_code == 502 and "upstream refused" in resp.text
            shown.append(resp.text)
            out: dict = {}
            _stream(gw.url, body, out, threading.Event(), timeout=30)
            events = out["events"]
            checks += len(events) >= 2 and events[-1] == "[DONE]" and "upstream refused" in events[-2]
            shown.extend(events)
        time.sleep(0.5)
        shown.append(gw.log.read_text())
        leaks = [s for s in secrets if any(s in text for text in shown)]
        sent = f"Basic {token}" in leaky.authorizations and f"Bearer {key}" in leaky.authorizations
        passed = checks == 4 and not leaks and sent
        return Row("streams/url-credentials-redacted", 0, -1, "", passed,
                   f"{checks}/4 upstream errors shown, credentials sent upstream: {sent}, leaked: {leaks or 'none'}")
    finally:
        gw.stop()
        leaky.stop()


# --- item 9 -----------------------------------------------------------------------------------

def _connect(gw: GatewayProcess) -> socket.socket:
    return socket.create_connection(("127.0.0.1", gw.port), timeout=10)


def _head(length: int) -> bytes:
    return (f"POST {CHAT} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n").encode()


def _status_and_closed(sock: socket.socket, timeout: float) -> tuple[int, bool]:
    """The status of the response on ``sock`` (0: none in time) and whether the server then closed it."""
    sock.settimeout(timeout)
    data = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    except (TimeoutError, socket.timeout):
        return (int(data.split()[1]) if data.startswith(b"HTTP/") else 0), False
    except ConnectionResetError:
        pass
    return (int(data.split()[1]) if data.startswith(b"HTTP/") else 0), True


def _small_request(gw: GatewayProcess) -> tuple[int, float]:
    started = time.monotonic()
    try:
        status = httpx.post(gw.url + CHAT, json={"messages": [{"role": "user", "content": "hi"}]}, timeout=30).status_code
    except httpx.HTTPError:
        status = 0
    return status, time.monotonic() - started


def slow_bodies() -> Row:
    gw = _gateway(_FAKE, MIXROUTE_BODY_READ_TIMEOUT_S="2")
    socks = []
    try:
        for _ in range(200):
            s = _connect(gw)
            s.sendall(_head(10_000) + b'{"messages": [')
            socks.append(s)
        time.sleep(1.0)
        for s in socks:  # still trickling: the deadline holds
            s.sendall(b" ")
        deadline = time.monotonic() + 10  # all of them, together: 2 s timeout and the time to answer
        answers = [_status_and_closed(s, timeout=max(0.05, deadline - time.monotonic())) for s in socks]
        timed_out = sum(1 for status, closed in answers if status == 408 and closed)
        status, _ = _small_request(gw)
        lines = gw.log.read_text().count("MIXROUTE_BODY_READ_TIMEOUT_S")
        passed = timed_out == len(socks) and status == 200 and lines == 1
        return Row("streams/slow-bodies", int(status == 200), -1, "", passed,
                   f"{timed_out}/{len(socks)} half-sent bodies got 408 and were closed; then a request: {status}; "
                   f"{lines} log line(s)")
    finally:
        for s in socks:
            s.close()
        gw.stop()


def connection_limit() -> Row:
    gw = _gateway(_FAKE, MIXROUTE_MAX_CONNECTIONS="50")
    held = []
    try:
        held = [_connect(gw) for _ in range(50)]
        time.sleep(0.3)
        refused = [_small_request(gw)[0] for _ in range(20)]
        for s in held:
            s.close()
        held = []
        time.sleep(0.3)
        after, _ = _small_request(gw)
        lines = gw.log.read_text().count("MIXROUTE_MAX_CONNECTIONS=50")
        passed = all(s == 503 for s in refused) and after == 200 and lines == 1
        return Row("streams/connection-limit", int(after == 200), -1, "", passed,
                   f"{refused.count(503)}/20 refused at 50 connections held, then {after}; {lines} log line(s)")
    finally:
        for s in held:
            s.close()
        gw.stop()


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def large_bodies(count: int = 60, size: int = 9_400_000, max_growth_mb: float = 400.0) -> Row:
    """``max_growth_mb``: about twice the default MIXROUTE_MAX_BODY_BYTES_IN_FLIGHT (raw bytes
    and their parsed copies) plus the answers' working memory. The small request's bound
    (:data:`SMALL_WAIT_S`) leaves room for the CPU the accepted bodies take on a small machine."""
    gw = _gateway(_FAKE)
    try:
        _small_request(gw)
        before = peak = _rss_mb(gw.proc.pid)
        filler = "x" * (size - 60)
        payload = json.dumps({"messages": [{"role": "user", "content": filler}]}).encode()
        statuses: list[int] = []

        def send() -> None:
            try:
                statuses.append(httpx.post(gw.url + CHAT, content=payload, timeout=120,
                                           headers={"content-type": "application/json"}).status_code)
            except httpx.HTTPError:
                statuses.append(0)

        threads = [threading.Thread(target=send) for _ in range(count)]
        for t in threads:
            t.start()
        time.sleep(0.5)
        small, waited = _small_request(gw)
        while any(t.is_alive() for t in threads):
            peak = max(peak, _rss_mb(gw.proc.pid))
            time.sleep(0.05)
        growth = peak - before
        served, busy = statuses.count(200), statuses.count(503)
        # Some must be told 503: 60 such bodies exceed the default budget of bodies in flight.
        passed = (growth < max_growth_mb and small == 200 and waited < SMALL_WAIT_S and served + busy == count
                  and served > 0 and busy > 0)
        return Row("streams/large-bodies", served + int(small == 200), -1, "", passed,
                   f"{count} x {size / 1e6:.1f} MB: {served} served, {busy} told 503; RSS +{growth:.0f} MB "
                   f"(bound {max_growth_mb:.0f}); small request {small} in {waited:.2f} s")
    finally:
        gw.stop()


_FAKE = """version: 1
backends:
  - {name: one, kind: fake, model: model-one, quality: 0.9}
routes:
  - {name: auto, backends: [one]}
"""

SCENARIOS = [
    ("streams/reload-during-long-stream", 5, reload_during_long_stream),
    ("streams/url-credentials-redacted", 8, url_credentials_redacted),
    ("streams/slow-bodies", 9, slow_bodies),
    ("streams/connection-limit", 9, connection_limit),
    ("streams/large-bodies", 9, large_bodies),
]
