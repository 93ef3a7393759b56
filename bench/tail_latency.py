"""Where the pass-through tail latency at concurrency 1 comes from: the same gateway with
one component switched off at a time, measured side by side in one run.

Run: ``python -m bench.tail_latency [--variants base,no-store-db,no-obs] [--rounds 5] [--duration 8]``

With ``--concurrency N`` wrk keeps N requests in flight instead of 1: the same variants at
and beyond saturation (e.g. ``--variants base,asyncio-loop --concurrency 64``, uvloop
against the standard loop where the gateway's core is full). The last table gives each
variant's time inside the ASGI app per request beside wrk's p99: a client tail far above the
app's longest time was spent before uvicorn handed the request over or after the app returned.

With ``--routed RATE`` the variants serve ``bench/policies/routed.yaml`` with the classifier
on, and each round sends an open-loop load of RATE requests/s (:func:`bench.loadgen.open_loop`,
as :mod:`bench.gateway_overhead` measures the routed target) instead of ``wrk -c1``: the
routed open-loop tail, one component off at a time.

Each variant is one pass-through gateway (``bench/policies/passthrough.yaml``, SQLite store,
admin key checked per request) pinned to CPU 1, as in :mod:`bench.gateway_overhead`; nginx
and ``wrk -c1`` share CPU 0. Rounds interleave the variants (A B C, A B C, ...) so that
load from other work on the machine hits them alike; the table gives, per variant, the
median over rounds of wrk's p50 and p99 latency (ms), of requests/s, and of the gateway's
CPU time and run-queue wait per request (``/proc/<pid>/task/*/schedstat``, us): a wait of
the loop thread comparable to the overhead means other processes on the gateway's core
take a large part of it.

Variants (bench-only switches, applied by monkeypatching in the served process; none
changes what the gateway does in production):

- ``base``: the gateway as shipped.
- ``unchunked``: the store writer upserts each batch in one statement per table, with no
  pause (as before ``gateway.store.writer.CHUNK_ROWS``).
- ``chunk-N[-P]``: the store writer upserts ``N`` rows per statement instead of
  ``CHUNK_ROWS`` (and pauses ``P`` us between statements instead of ``CHUNK_PAUSE_S``).
- ``no-store-db``: rows are queued as usual but the writer thread drops each batch instead
  of writing it (the database and journal work leaves the process).
- ``no-store``: ``record_decision``/``record_outcome`` do nothing at all.
- ``no-obs``: the observability middleware does not open a request context, so no metric,
  span or attempt gauge is touched.
- ``no-gc``: the garbage collector is disabled after start-up.
- ``bare``: ``no-store`` + ``no-obs`` + ``no-gc``.
- ``nice-writer``: the store writer's thread at nice 10 (the OS prefers the event loop
  when both want the one core).
- ``normal-writer``: the store writer's thread keeps the normal scheduling policy
  (``MIXROUTE_STORE_WRITER_IDLE=false``) instead of ``SCHED_IDLE`` while no backlog is
  queued (the default: a request that wakes the event loop preempts an
  idle-policy writer at once, where a normal or niced one may first finish its time slice).
- ``switch-0.5ms``: the interpreter's thread switch interval at 0.5 ms instead of 5 ms (a
  thread waiting for the GIL gets it sooner); ``nice-switch``: both.
- ``sqla-write``: the store writer binds rows through SQLAlchemy's executemany instead of
  the driver-level path (``gateway.store.upsert.write_items(driver_level=False)``).
- ``sync-normal``: the SQLite store with ``PRAGMA synchronous=NORMAL`` (WAL files are
  fsynced at checkpoints, not at every commit): whether the commits' fsyncs reach the tail.
- ``linear-default``: the classifier's frozen maps through torch's default ``F.linear``
  (``MIXROUTE_CLASSIFIER_LINEAR=default``) instead of ``auto`` (with ``--routed``).
- ``asyncio-loop``: the gateway as shipped on the standard library's event loop
  (``MIXROUTE_EVENT_LOOP=asyncio``) instead of uvloop: ``base,asyncio-loop`` compares the
  two loops round by round.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.gateway_overhead import GATEWAY_CPU, LOAD_CPU, ROOT, _free_port
from bench.loadgen import open_loop, wrk
from bench.upstream import NginxUpstream, _wait_http

VARIANTS = ("base", "unchunked", "no-store-db", "no-store", "no-obs", "no-gc", "bare", "asyncio-loop", "nice-writer",
            "switch-0.5ms", "nice-switch", "sqla-write", "sync-normal", "normal-writer", "linear-default")


def _patch(variant: str) -> None:
    """Switch off the component(s) ``variant`` names, in this (the served) process."""
    from gateway.observability import hooks
    from gateway.store.writer import Store

    parts = {"bare": {"no-store", "no-obs", "no-gc"}, "nice-switch": {"nice-writer", "switch-0.5ms"}}.get(
        variant, {variant})
    if "asyncio-loop" in parts:
        os.environ["MIXROUTE_EVENT_LOOP"] = "asyncio"  # read by the settings that serve() builds
    if "unchunked" in parts:
        import gateway.store.writer as writer

        writer.CHUNK_ROWS, writer.CHUNK_PAUSE_S = None, 0.0
    chunk = next((p for p in parts if p.startswith("chunk-")), None)
    if chunk:
        import gateway.store.writer as writer

        rows, _, pause_us = chunk.removeprefix("chunk-").partition("-")
        writer.CHUNK_ROWS = int(rows)
        if pause_us:
            writer.CHUNK_PAUSE_S = int(pause_us) / 1e6
    if "sqla-write" in parts:
        import functools

        import gateway.store.writer as writer

        writer.write_items = functools.partial(writer.write_items, driver_level=False)
    if "sync-normal" in parts:
        from gateway.store import db

        pragmas = db._sqlite_pragmas

        def sync_normal(dbapi_conn, record):
            pragmas(dbapi_conn, record)
            dbapi_conn.execute("PRAGMA synchronous=NORMAL")

        db._sqlite_pragmas = sync_normal
    if "switch-0.5ms" in parts:
        import sys

        sys.setswitchinterval(0.0005)
    if "linear-default" in parts:
        os.environ["MIXROUTE_CLASSIFIER_LINEAR"] = "default"  # read by the settings that serve() builds
    if "normal-writer" in parts:
        os.environ["MIXROUTE_STORE_WRITER_IDLE"] = "false"  # read by the settings that serve() builds
    if "nice-writer" in parts:
        original_nice = Store._cycle

        def niced(self, batch, raise_unexpected=False):
            import threading

            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
            return original_nice(self, batch, raise_unexpected)

        Store._cycle = niced
    if "no-store-db" in parts:
        original = Store._cycle

        def cycle(self, batch, raise_unexpected=False):
            return original(self, [], raise_unexpected)  # migrate/replay, but write no live row

        Store._cycle = cycle
    if "no-store" in parts:
        Store.record_decision = lambda self, rec: None
        Store.record_outcome = lambda self, rec: None
    if "no-obs" in parts:
        async def passthrough(self, scope, receive, send):
            await self.app(scope, receive, send)

        hooks.ObservabilityMiddleware.__call__ = passthrough
    if "no-gc" in parts:
        freeze = gc.freeze

        def freeze_and_disable():  # gateway.app calls gc.freeze() once, at the end of start-up
            freeze()
            gc.disable()

        gc.freeze = freeze_and_disable


def _record_cpu(out: Path) -> None:
    """Record the process's CPU time (all threads) at the start of each HTTP request, and
    write the gaps between consecutive starts to ``out`` (JSON, seconds) at shutdown.

    At concurrency 1 a gap is the CPU the gateway spent per request, including what its
    other threads (the store writer) ran meanwhile, but not the time other processes held
    the core: the gateway's own tail, separated from the machine's. Each request's wall time
    inside the ASGI app goes to :func:`_app_path` of ``out`` too."""
    import orjson

    import gateway.app

    marks: list[float] = []
    inside: list[float] = []  # wall seconds from the app's entry to its exit, per HTTP request
    create = gateway.app.create_app

    def create_app(settings=None):
        app = create(settings)
        inner = app.build_middleware_stack

        def build():
            asgi = inner()

            async def timed(scope, receive, send):
                if scope["type"] == "http":
                    marks.append(time.process_time())
                elif scope["type"] == "lifespan":  # uvicorn re-raises SIGTERM after shutdown: no atexit
                    async def watched():
                        message = await receive()
                        if message["type"] == "lifespan.shutdown":
                            out.write_bytes(orjson.dumps([b - a for a, b in zip(marks, marks[1:])]))
                            _app_path(out).write_bytes(orjson.dumps(inside))
                        return message

                    await asgi(scope, watched, send)
                    return
                started = time.perf_counter()
                try:
                    await asgi(scope, receive, send)
                finally:
                    if scope["type"] == "http":
                        inside.append(time.perf_counter() - started)

            return timed

        app.build_middleware_stack = build
        return app

    gateway.app.create_app = create_app


def _app_path(cpu_out: Path) -> Path:
    """Where a served variant writes its in-app request times (next to its CPU record)."""
    return cpu_out.with_name(cpu_out.name.removesuffix(".cpu.json") + ".app.json")


def serve(variant: str, policy: str, port: int, database_url: str, cpu_out: Path) -> None:
    """Serve one variant (the child process of :func:`main`)."""
    _patch(variant)
    _record_cpu(cpu_out)
    from gateway.serve import run

    run(policy=Path(policy), host="127.0.0.1", port=port, database_url=database_url)


def _schedstat(pid: int) -> tuple[int, int]:
    """(CPU time of all threads of ``pid``, time its event-loop thread was runnable but
    waiting for a CPU), ns (``/proc/<pid>/task/*/schedstat``)."""
    cpu = wait = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "schedstat").read_text().split()
        except OSError:  # the thread ended meanwhile
            continue
        cpu += int(fields[0])
        if task.name == str(pid):  # the main thread runs uvicorn's event loop
            wait = int(fields[1])
    return cpu, wait


def start(variant: str, upstream: str, tmp: Path, routed: bool = False) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    env = {**os.environ, "MIXROUTE_UPSTREAM_URL": upstream, "MIXROUTE_POLICY_WATCH": "false",
           "MIXROUTE_LOG_LEVEL": "warning", "MIXROUTE_CLASSIFIER": "auto" if routed else "off",
           "MIXROUTE_ADMIN_KEY": "sk-bench"}
    env.pop("MIXROUTE_REDIS_URL", None)
    cmd = [sys.executable, "-m", "bench.tail_latency", "--serve", variant, "--port", str(port),
           *(["--routed", "1"] if routed else []),
           "--database-url", f"sqlite:///{tmp}/{variant}.db", "--cpu-out", str(tmp / f"{variant}.cpu.json")]
    if Path("/usr/bin/taskset").exists():
        cmd = ["taskset", "-c", str(GATEWAY_CPU), *cmd]
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=open(tmp / f"{variant}.log", "w"))
    _wait_http(f"http://127.0.0.1:{port}/readyz", timeout=120)
    return proc, f"http://127.0.0.1:{port}/v1/chat/completions"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default="base,no-store-db,no-store,no-obs,no-gc,bare")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--duration", type=int, default=8, help="seconds per wrk run")
    parser.add_argument("--concurrency", type=int, default=1, help="requests wrk keeps in flight (default 1)")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--database-url", help=argparse.SUPPRESS)
    parser.add_argument("--cpu-out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--routed", type=float, default=0.0, metavar="RATE",
                        help="routed gateways (classifier on) under an open-loop load of RATE requests/s")
    args = parser.parse_args()
    policy = "bench/policies/routed.yaml" if args.routed else "bench/policies/passthrough.yaml"
    if args.serve:
        serve(args.serve, str(ROOT / policy), args.port, args.database_url, args.cpu_out)
        return
    if args.routed < 0:
        parser.error("--routed RATE must be positive")
    if args.concurrency < 1:
        parser.error("--concurrency must be at least 1")
    variants = [v for v in args.variants.split(",") if v]
    unknown = {v for v in variants if v not in VARIANTS and not (v.startswith("chunk-") and v[6:].replace("-", "").isdigit())}
    if unknown:
        parser.error(f"unknown variant(s) {sorted(unknown)} (known: {', '.join(VARIANTS)})")
    tmp = Path(tempfile.mkdtemp(prefix="mixroute-tail-"))
    upstream = NginxUpstream(_free_port(), cpu=LOAD_CPU).start()
    procs: dict[str, subprocess.Popen] = {}
    urls: dict[str, str] = {}
    results: dict[str, list] = {"direct": []}
    sched: dict[str, list[tuple[float, float]]] = {"direct": []}
    try:
        for v in variants:
            procs[v], urls[v] = start(v, upstream.url, tmp, routed=bool(args.routed))
            results[v] = []
            sched[v] = []
        def load(url: str, model: str = "bench"):
            if args.routed:
                return asyncio.run(open_loop(url, args.routed, args.duration, model=model))
            return wrk(url, args.concurrency, args.duration, cpu=LOAD_CPU)

        model = "auto" if args.routed else "bench"
        for _ in range(3):  # warm-up: connection pools, caches, first batches
            for v in variants:
                wrk(urls[v], 1, 1, model=model, cpu=LOAD_CPU)
        for r in range(args.rounds):
            results["direct"].append(load(upstream.url + "/chat/completions"))
            for v in variants:
                before = _schedstat(procs[v].pid)
                run = load(urls[v], model)
                after = _schedstat(procs[v].pid)
                n = max(run.rps * args.duration, 1)
                results[v].append(run)
                sched[v].append(((after[0] - before[0]) / n / 1e3, (after[1] - before[1]) / n / 1e3))
            print(f"round {r + 1}/{args.rounds}: " + "  ".join(
                f"{k} p99 {rs[-1].p99_ms:.2f}" for k, rs in results.items()), file=sys.stderr)
    finally:
        for p in procs.values():
            p.terminate()
        for p in procs.values():
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        upstream.stop()
    _print(results, sched)
    _print_cpu(tmp, variants)
    _print_app(tmp, variants, results)


def _print(results: dict[str, list], sched: dict[str, list[tuple[float, float]]]) -> None:
    direct_p50 = statistics.median(r.p50_ms for r in results["direct"])
    direct_p99 = statistics.median(r.p99_ms for r in results["direct"])
    print(f"median of {len(results['direct'])} rounds (ms); overhead = variant - direct")
    print("cpu/req: the gateway's CPU time per request (all threads, us); wait/req: time its event-loop")
    print("thread was runnable but waiting for the CPU (other processes on its core), per request (us)")
    print(f"{'variant':<12} {'p50':>7} {'p99':>7} {'ovh p50':>8} {'ovh p99':>8} {'req/s':>7} {'cpu/req':>8} {'wait/req':>8}"
          f" {'p99 per round'}")
    for name, rs in results.items():
        p50 = statistics.median(r.p50_ms for r in rs)
        p99 = statistics.median(r.p99_ms for r in rs)
        rps = statistics.median(r.rps for r in rs)
        rounds = " ".join(f"{r.p99_ms:.2f}" for r in rs)
        cpu = statistics.median(c for c, _ in sched[name]) if sched[name] else float("nan")
        wait = statistics.median(w for _, w in sched[name]) if sched[name] else float("nan")
        print(f"{name:<12} {p50:7.3f} {p99:7.3f} {p50 - direct_p50:8.3f} {p99 - direct_p99:8.3f} {rps:7.0f} {cpu:8.0f}"
              f" {wait:8.0f} {rounds}")


def _records(path: Path, v: str) -> list[float] | None:
    """A served variant's sorted record at ``path``; ``None`` (with a line saying why) when it
    is missing or holds fewer than 100 requests."""
    import orjson

    if not path.exists():
        print(f"{v:<12} (no record: the process did not exit cleanly)")
        return None
    values = sorted(orjson.loads(path.read_bytes()))
    if len(values) < 100:
        print(f"{v:<12} (only {len(values)} requests)")
        return None
    return values


def _print_cpu(tmp: Path, variants: list[str]) -> None:
    print("\nCPU of the gateway process between consecutive request starts (us; all threads; the time")
    print("other processes held the core is not in it), all measured requests pooled:")
    print(f"{'variant':<12} {'n':>7} {'p50':>7} {'p90':>7} {'p99':>7} {'p99.9':>7}")
    for v in variants:
        gaps = _records(tmp / f"{v}.cpu.json", v)
        if gaps is not None:
            q = statistics.quantiles(gaps, n=1000)
            print(f"{v:<12} {len(gaps):7d} " + " ".join(f"{q[i] * 1e6:7.0f}" for i in (499, 899, 989, 998)))


def _print_app(tmp: Path, variants: list[str], results: dict[str, list]) -> None:
    """In-app time per request (the ASGI app's entry to its exit, warm-up included) beside
    the client's p99: what the client waits beyond the app's longest time was spent before
    uvicorn handed the request to the app or after the app returned (socket, loop)."""
    print("\nTime inside the ASGI app per request (ms, wall; all requests pooled) against wrk's median p99:")
    print(f"{'variant':<12} {'n':>7} {'p50':>8} {'p99':>8} {'max':>8} {'wrk p99':>8}")
    for v in variants:
        times = _records(_app_path(tmp / f"{v}.cpu.json"), v)
        if times is not None:
            q = statistics.quantiles(times, n=100)
            wrk_p99 = statistics.median(r.p99_ms for r in results[v])
            print(f"{v:<12} {len(times):7d} {q[49] * 1e3:8.2f} {q[98] * 1e3:8.2f} {times[-1] * 1e3:8.1f} "
                  f"{wrk_p99:8.2f}")

if __name__ == "__main__":
    main()
