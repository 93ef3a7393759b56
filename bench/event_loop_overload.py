"""uvloop vs the standard asyncio loop beyond saturation, with no mixroute code at all.

    python -m bench.event_loop_overload [--rounds 2] [--duration 5] [--connections 128]

A bare ASGI app (read the body, burn ``--work-ms`` of CPU, answer a fixed JSON) runs under
uvicorn pinned to CPU 1, once per loop; ``wrk`` (pinned to CPU 0) drives it closed-loop at
``--connections``. Prints p50/p99 latency, requests/s and wrk's errors (mostly timeouts: over
wrk's 2 s) per loop and round, interleaved. Needs ``wrk`` (``apt-get install wrk``) and
uvloop. Used by docs/BENCHMARKS.md, "Event loop under overload".
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.loadgen import wrk
from bench.upstream import _wait_http

APP = '''
import time
BODY = b'{"id":"x","object":"chat.completion","choices":[]}'
WORK_S = float(__import__("os").environ["WORK_S"])
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    t = time.perf_counter()
    while time.perf_counter() - t < WORK_S:
        pass
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": BODY})
'''


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--duration", type=int, default=5, help="seconds per wrk run")
    ap.add_argument("--connections", type=int, default=128)
    ap.add_argument("--work-ms", type=float, default=0.9, help="CPU per request (ms)")
    a = ap.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="mixroute-loop-"))
    (folder / "loopapp.py").write_text(APP)
    env = {**os.environ, "WORK_S": str(a.work_ms / 1000), "PYTHONPATH": str(folder)}
    port = 18990
    for rnd in range(a.rounds):
        for loop in ("uvloop", "asyncio"):
            cmd = ["taskset", "-c", "1", sys.executable, "-m", "uvicorn", "loopapp:app", "--port", str(port),
                   "--loop", loop, "--log-level", "warning", "--no-access-log"]
            proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                _wait_http(f"http://127.0.0.1:{port}/", method="POST")
                time.sleep(0.5)
                r = wrk(f"http://127.0.0.1:{port}/", a.connections, a.duration, cpu=0)
                print(f"round {rnd} {loop:8s} c={a.connections}: p50 {r.p50_ms:.1f} ms  p99 {r.p99_ms:.1f} ms  "
                      f"{r.rps:.0f} req/s  wrk errors {r.errors}", flush=True)
            finally:
                proc.terminate()
                proc.wait(timeout=10)
            port += 1


if __name__ == "__main__":
    main()
