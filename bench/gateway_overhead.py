"""Gateway overhead, side by side in one run: direct, mixroute pinned pass-through,
mixroute routed (classifier on), LiteLLM's proxy and Portkey's gateway, all in front of the same fixed nginx
upstream (:mod:`bench.upstream`).

Run: ``python -m bench.gateway_overhead [--json OUT] [--duration 5] [--skip-litellm] [--skip-portkey]
[--doors-only]``

``mixroute-passthrough`` runs on the default event loop (uvloop), ``mixroute-passthrough-asyncio``
on the standard library's (``MIXROUTE_EVENT_LOOP=asyncio``): same code, to show what each
loop does at and beyond saturation.

Each gateway runs as one worker process pinned to CPU 1 (``taskset``); the closed-loop
generator ``wrk`` and nginx share CPU 0. For each setup it prints:

- overhead p50/p99 (ms) at concurrency 1 and 8: the setup's latency percentile minus the
  direct one at the same concurrency;
- the maximum requests/s over a sweep of concurrency levels among runs whose p99 stayed
  under 50 ms, the peak requests/s of the sweep, and the count of failed requests;
- peak RSS (MiB, ``VmHWM`` of the worker process) and start-up time to readiness (s);
- routed only: overhead p99 under an open-loop 50 requests/s load (:func:`bench.loadgen.open_loop`);
- on the pass-through gateway, each door (Chat Completions, Responses, Messages; one the app
  does not serve is skipped with a note) and a session lookup (``x-mixroute-session``):
  :mod:`bench.doors`; ``--doors-only`` runs only those (and direct at c=1);
- issue 41's targets, met or missed.

LiteLLM's proxy (pinned ``litellm[proxy]==1.106.12``: the newest release whose ``proxy``
extra installs from PyPI here; later ones need a ``litellm-proxy`` package that the index
does not serve) is installed by this script into its own virtual environment under
``~/.cache/mixroute/bench/`` on first use; Portkey's Node gateway likewise from npm
(:mod:`bench.portkey`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import orjson

from bench.doors import door_rows, door_targets, measure_doors
from bench.loadgen import Result, open_loop, settle, wrk
from bench.portkey import start_portkey
from bench.upstream import NginxUpstream, _wait_http

LITELLM_VERSION = "1.106.12"
ROOT = Path(__file__).resolve().parents[1]
GATEWAY_CPU, LOAD_CPU = 1, 0
# 16: issue 41 compares requests/s at 16 connections.
SWEEP = (1, 8, 16, 32, 64, 128)


@dataclass
class Setup:
    name: str
    url: str = ""
    model: str = "bench"
    headers: dict[str, str] = field(default_factory=dict)
    pid: int | None = None
    startup_s: float | None = None
    runs: dict[int, Result] = field(default_factory=dict)
    peak_rss_mib: float | None = None
    open_loop_50: Result | None = None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pin(cmd: list[str]) -> list[str]:
    return ["taskset", "-c", str(GATEWAY_CPU), *cmd] if os.path.exists("/usr/bin/taskset") else cmd


def _peak_rss_mib(pid: int) -> float:
    """Largest VmHWM among ``pid`` and its descendants (a worker's peak RSS), MiB."""
    best, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            status = Path(f"/proc/{p}/status").read_text()
            best = max(best, int(next(l.split()[1] for l in status.splitlines() if l.startswith("VmHWM"))) / 1024)
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, StopIteration):
            continue
    return best


def start_mixroute(policy: str, upstream: str, tmp: Path, classifier: str,
                   event_loop: str = "auto") -> tuple[subprocess.Popen, str, float]:
    port = _free_port()
    # Both gateways check one key per request (LiteLLM: its master key; mixroute: the admin key).
    env = {**os.environ, "MIXROUTE_UPSTREAM_URL": upstream, "MIXROUTE_POLICY_WATCH": "false",
           "MIXROUTE_LOG_LEVEL": "warning", "MIXROUTE_CLASSIFIER": classifier, "MIXROUTE_ADMIN_KEY": "sk-bench",
           "MIXROUTE_EVENT_LOOP": event_loop}
    env.pop("MIXROUTE_REDIS_URL", None)
    cmd = _pin([sys.executable, "-m", "gateway.cli", "serve", "--policy", str(ROOT / policy), "--port", str(port),
                "--database-url", f"sqlite:///{tmp}/{port}.db"])
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=open(tmp / f"{port}.log", "w"))
    _wait_http(f"http://127.0.0.1:{port}/readyz", timeout=120)
    return proc, f"http://127.0.0.1:{port}/v1/chat/completions", time.monotonic() - t0


def litellm_venv() -> Path:
    venv = Path.home() / ".cache" / "mixroute" / "bench" / f"litellm-{LITELLM_VERSION}"
    if not (venv / "bin" / "litellm").exists():
        print(f"installing litellm[proxy]=={LITELLM_VERSION} into {venv} ...", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", f"litellm[proxy]=={LITELLM_VERSION}"], check=True)
    return venv


def start_litellm(upstream: str, tmp: Path) -> tuple[subprocess.Popen, str, float]:
    venv = litellm_venv()
    port = _free_port()
    cfg = tmp / "litellm.yaml"
    cfg.write_text(orjson.dumps({
        "model_list": [{"model_name": "bench", "litellm_params": {
            "model": "openai/bench-model", "api_base": upstream, "api_key": "sk-bench"}}],
        "litellm_settings": {"drop_params": True},
        "general_settings": {"master_key": "sk-bench"},
    }).decode())
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR"}
    cmd = _pin([str(venv / "bin" / "litellm"), "--config", str(cfg), "--host", "127.0.0.1", "--port", str(port),
                "--num_workers", "1"])
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=open(tmp / "litellm.log", "w"))
    _wait_http(f"http://127.0.0.1:{port}/health/readiness", timeout=180)
    return proc, f"http://127.0.0.1:{port}/v1/chat/completions", time.monotonic() - t0


def measure(setup: Setup, duration: int) -> None:
    """The closed-loop sweep; before each run (and after the last, before the open loop)
    the gateway works off the previous run's leftover queue (:func:`bench.loadgen.settle`)."""
    for c in SWEEP:
        settle(setup.url, setup.model, headers=setup.headers)
        setup.runs[c] = wrk(setup.url, c, duration, model=setup.model, cpu=LOAD_CPU, headers=setup.headers)
    settle(setup.url, setup.model, headers=setup.headers)


def summarize(setups: list[Setup]) -> list[dict]:
    direct = setups[0]
    litellm = next((s for s in setups if s.name == "litellm-proxy"), None)

    def max_rps(s: Setup) -> float:
        ok = [r.rps for r in s.runs.values() if r.p99_ms < 50]
        return max(ok) if ok else 0.0

    def peak_rps(s: Setup) -> float:
        return max(r.rps for r in s.runs.values())

    rows = []
    for s in setups:
        row = {"setup": s.name, "max_rps_p99_under_50ms": max_rps(s), "peak_rps": peak_rps(s),
               "c16_rps": s.runs[16].rps if 16 in s.runs else None,
               "errors": sum(r.errors for r in s.runs.values()), "peak_rss_mib": s.peak_rss_mib,
               "startup_s": s.startup_s,
               "sweep": {str(c): asdict(r) for c, r in sorted(s.runs.items())}}
        for c in (1, 8):
            row[f"c{c}_p50_ms"] = s.runs[c].p50_ms
            row[f"c{c}_p99_ms"] = s.runs[c].p99_ms
            row[f"c{c}_overhead_p50_ms"] = s.runs[c].p50_ms - direct.runs[c].p50_ms
            row[f"c{c}_overhead_p99_ms"] = s.runs[c].p99_ms - direct.runs[c].p99_ms
        if s.open_loop_50:
            row["open_loop_50rps_p99_ms"] = s.open_loop_50.p99_ms
            row["open_loop_50rps_overhead_p99_ms"] = s.open_loop_50.p99_ms - direct.open_loop_50.p99_ms
        if litellm and s is not litellm and s is not direct and litellm.runs:
            row["peak_rps_vs_litellm"] = peak_rps(s) / peak_rps(litellm)
            if max_rps(litellm):
                row["rps_vs_litellm"] = max_rps(s) / max_rps(litellm)
            if s.peak_rss_mib and litellm.peak_rss_mib:
                row["rss_vs_litellm"] = s.peak_rss_mib / litellm.peak_rss_mib
        rows.append({k: asdict(v) if isinstance(v, Result) else v for k, v in row.items()})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--duration", type=int, default=5, help="seconds per wrk run")
    parser.add_argument("--skip-litellm", action="store_true")
    parser.add_argument("--skip-portkey", action="store_true")
    parser.add_argument("--doors-only", action="store_true", help="only the doors and the session lookup")
    args = parser.parse_args()
    import tempfile

    tmp = Path(tempfile.mkdtemp(prefix="mixroute-bench-"))
    upstream = NginxUpstream(_free_port(), cpu=LOAD_CPU).start()
    setups = [Setup("direct", url=upstream.url + "/chat/completions")]
    procs, doors = [], []
    if args.doors_only:
        try:
            setups[0].runs[1] = wrk(setups[0].url, 1, args.duration, cpu=LOAD_CPU)
            proc, url, _ = start_mixroute("bench/policies/passthrough.yaml", upstream.url, tmp, "off")
            try:
                doors = door_rows(measure_doors(url.removesuffix("/v1/chat/completions"), args.duration, LOAD_CPU),
                                  setups[0].runs[1])
            finally:
                proc.terminate()
                proc.wait(timeout=30)
        finally:
            upstream.stop()
        _print_targets(door_targets(doors), doors)
        if args.json:
            args.json.write_text(orjson.dumps({"doors": doors}, option=orjson.OPT_INDENT_2).decode())
        return
    try:
        plan = [("mixroute-passthrough", lambda: (*start_mixroute("bench/policies/passthrough.yaml", upstream.url, tmp,
                                                                   "off"), {})),
                ("mixroute-passthrough-asyncio", lambda: (*start_mixroute("bench/policies/passthrough.yaml",
                                                                           upstream.url, tmp, "off", "asyncio"), {})),
                ("mixroute-routed", lambda: (*start_mixroute("bench/policies/routed.yaml", upstream.url, tmp, "auto"),
                                             {}))]
        if not args.skip_litellm:
            plan.append(("litellm-proxy", lambda: (*start_litellm(upstream.url, tmp), {})))
        if not args.skip_portkey:
            plan.append(("portkey", lambda: start_portkey(upstream.url, tmp, _free_port(), _pin)))
        measure(setups[0], args.duration)
        setups[0].open_loop_50 = asyncio.run(open_loop(setups[0].url, 50, 10))
        for name, start in plan:
            proc, url, startup, headers = start()
            procs.append(proc)
            s = Setup(name, url=url, headers=headers, pid=proc.pid, startup_s=startup,
                      model="auto" if "routed" in name else "bench")
            measure(s, args.duration)
            if name == "mixroute-routed":
                s.open_loop_50 = asyncio.run(open_loop(s.url, 50, 10, model="auto"))
            s.peak_rss_mib = _peak_rss_mib(proc.pid)
            if name == "mixroute-passthrough":
                doors = door_rows(measure_doors(url.removesuffix("/v1/chat/completions"), args.duration, LOAD_CPU),
                                  setups[0].runs[1])
            proc.terminate()
            proc.wait(timeout=30)
            setups.append(s)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        upstream.stop()
    rows = summarize(setups)
    _print(rows)
    _print_targets(targets(rows) + door_targets(doors), doors)
    if args.json:
        args.json.write_text(orjson.dumps({"setups": rows, "doors": doors}, option=orjson.OPT_INDENT_2).decode())


def targets(rows: list[dict]) -> list[tuple[str, str, bool | None]]:
    """``(target, measured, met)`` for issue 41's gateway targets (``None``: not measured)."""
    by = {r["setup"]: r for r in rows}
    routed, passthrough, portkey = by.get("mixroute-routed"), by.get("mixroute-passthrough"), by.get("portkey")
    name = "routed rps (c=16) at least Portkey's pass-through rps"
    if routed and portkey and routed.get("c16_rps") and portkey.get("c16_rps"):
        out: list[tuple[str, str, bool | None]] = [
            (name, f"{routed['c16_rps']:.0f} vs {portkey['c16_rps']:.0f} ({routed['c16_rps'] / portkey['c16_rps']:.2f}x)",
             routed["c16_rps"] >= portkey["c16_rps"])]
    else:
        out = [(name, "Portkey or the routed gateway was not run", None)]
    if routed:
        out.append(("routed c=1 overhead p50 at most 3 ms", f"{routed['c1_overhead_p50_ms']:.2f} ms",
                    routed["c1_overhead_p50_ms"] <= 3.0))
        rss = routed.get("peak_rss_mib")
        out.append(("routed peak RSS at most 350 MiB", f"{rss:.0f} MiB" if rss else "n/a",
                    None if rss is None else rss <= 350))
        out.append(("routed: zero errors", str(routed["errors"]), routed["errors"] == 0))
    if passthrough:
        out.append(("pass-through c=1 overhead p99 at most 1.5 ms", f"{passthrough['c1_overhead_p99_ms']:.2f} ms",
                    passthrough["c1_overhead_p99_ms"] <= 1.5))
    return out


def _print_targets(found: list[tuple[str, str, bool | None]], doors: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table("door", "c1 ovh p50", "c1 ovh p99", "rps (c=16)", "errors", "note",
                  title="doors on the pass-through gateway (overhead vs direct, ms)")
    for d in doors:
        table.add_row(d["door"], *(f"{d[k]:.2f}" if k in d else "" for k in ("c1_overhead_p50_ms", "c1_overhead_p99_ms")),
                      f"{d['rps']:.0f}" if "rps" in d else "", str(d.get("errors", "")), d["note"])
    Console().print(table)
    table = Table("target (issue 41)", "measured", "met", title="targets")
    for name, measured, met in found:
        table.add_row(name, measured, {True: "met", False: "MISSED", None: "not measured"}[met])
    Console().print(table)


def _print(rows: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table

    def f(v, fmt=".2f"):
        return "" if v is None else format(v, fmt)

    table = Table("setup", "c1 ovh p50", "c1 ovh p99", "c8 ovh p50", "c8 ovh p99", "rps c=16", "max rps (p99<50ms)",
                  "peak rps",
                  "errors", "peak RSS MiB", "start s", "peak rps/LiteLLM", "RSS/LiteLLM", "50rps ovh p99",
                  title="gateway overhead vs direct (ms), one worker on one core")
    for r in rows:
        table.add_row(r["setup"], f(r["c1_overhead_p50_ms"]), f(r["c1_overhead_p99_ms"]), f(r["c8_overhead_p50_ms"]),
                      f(r["c8_overhead_p99_ms"]), f(r.get("c16_rps"), ".0f"), f(r["max_rps_p99_under_50ms"], ".0f"),
                      f(r["peak_rps"], ".0f"),
                      str(r["errors"]), f(r.get("peak_rss_mib"), ".0f"), f(r.get("startup_s")),
                      f(r.get("peak_rps_vs_litellm")),
                      f(r.get("rss_vs_litellm")), f(r.get("open_loop_50rps_overhead_p99_ms")))
    Console().print(table)


if __name__ == "__main__":
    main()
