"""Load generators.

- Closed loop: ``wrk`` (Debian's package; C, event-driven): a fixed number of connections,
  each sending its next request when the previous one returns. Parsed from
  ``wrk --latency`` output: p50/p99 latency and requests/s.
- Open loop: an asyncio httpx client sending requests at a fixed arrival rate whatever the
  latency (so queueing shows up as latency, not as a lower rate).
"""

from __future__ import annotations

import asyncio
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass

import orjson

BODY = {"model": "bench", "messages": [{"role": "user", "content": "Say hello in five words."}], "max_tokens": 16}

_LUA = """
wrk.method = "POST"
wrk.body = '{body}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer sk-bench"
"""


@dataclass
class Result:
    """One load run: latencies in milliseconds, throughput in requests/s."""

    p50_ms: float
    p99_ms: float
    rps: float
    errors: int


def _ms(value: str, unit: str) -> float:
    return float(value) * {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4}[unit]


def wrk(url: str, connections: int, duration_s: int, model: str = "bench", cpu: int | None = None,
        body: dict | None = None, headers: dict[str, str] | None = None) -> Result:
    """Closed-loop run of ``wrk`` against ``url`` (the full chat completions URL, or another
    door's with its own ``body``; ``headers`` are sent besides the JSON type and the key).

    Raises:
        RuntimeError: wrk missing (``apt-get install wrk``) or unparsable output.
    """
    if not shutil.which("wrk"):
        raise RuntimeError("wrk is not installed: apt-get install -y wrk")
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(_LUA.format(body=orjson.dumps(body if body is not None else {**BODY, "model": model}).decode()))
        for name, value in (headers or {}).items():
            f.write(f'wrk.headers["{name}"] = "{value}"\n')
    cmd = ["wrk", "--latency", "-t1", f"-c{connections}", f"-d{duration_s}s", "-s", f.name, url]
    if cpu is not None and shutil.which("taskset"):
        cmd = ["taskset", "-c", str(cpu), *cmd]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=duration_s + 60).stdout
    pct = dict(re.findall(r"^\s+(50|99)%\s+([\d.]+\w+)", out, re.M))
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if not pct or not rps:
        raise RuntimeError(f"cannot parse wrk output:\n{out}")

    def parse(v: str) -> float:
        m = re.match(r"([\d.]+)(us|ms|s|m)$", v)
        return _ms(m.group(1), m.group(2))

    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    sock = re.search(r"Socket errors:.*?connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    errors = (int(non2xx.group(1)) if non2xx else 0) + (sum(map(int, sock.groups())) if sock else 0)
    return Result(parse(pct["50"]), parse(pct["99"]), float(rps.group(1)), errors)


def settle(url: str, model: str = "bench", *, quiet_ms: float = 50.0, timeout_s: float = 60.0,
           headers: dict[str, str] | None = None) -> float:
    """Wait until the gateway has worked off what the previous load left queued, so that one
    measurement does not pay for another's backlog: a closed-loop run at concurrency c stops
    with up to c requests still queued inside the gateway (wrk closes its connections; the
    gateway finishes them), which for the classifier-bound routed gateway is about a second
    of work after c=128. Sends one request at a time until three in a row answer within
    ``quiet_ms``. Returns the seconds waited."""
    import httpx

    body = orjson.dumps({**BODY, "model": model})
    headers = {"content-type": "application/json", "authorization": "Bearer sk-bench", **(headers or {})}
    start, quiet = time.perf_counter(), 0
    with httpx.Client(timeout=30) as client:
        while quiet < 3 and time.perf_counter() - start < timeout_s:
            t0 = time.perf_counter()
            try:
                client.post(url, content=body, headers=headers)
            except httpx.HTTPError:
                pass
            quiet = quiet + 1 if (time.perf_counter() - t0) * 1e3 < quiet_ms else 0
    return time.perf_counter() - start


async def open_loop(url: str, rate: float, duration_s: float, model: str = "bench") -> Result:
    """Send ``rate`` requests/s for ``duration_s`` seconds; latency of each (ms)."""
    import httpx

    latencies: list[float] = []
    errors = 0
    body = orjson.dumps({**BODY, "model": model})
    headers = {"content-type": "application/json", "authorization": "Bearer sk-bench"}
    async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=500)) as client:
        async def one():
            nonlocal errors
            t0 = time.perf_counter()
            try:
                r = await client.post(url, content=body, headers=headers)
                if r.status_code != 200:
                    errors += 1
            except httpx.HTTPError:
                errors += 1
            latencies.append((time.perf_counter() - t0) * 1e3)

        tasks, start, n = [], time.perf_counter(), int(rate * duration_s)
        for i in range(n):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one()))
        await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - start
    q = statistics.quantiles(latencies, n=100)
    return Result(statistics.median(latencies), q[98], len(latencies) / elapsed, errors)
