"""Store writer throughput into PostgreSQL: decision+outcome pairs per second.

Usage (from the repository root)::

    python -m bench.store_writer [--database-url URL] [--pairs 20000] [--runs 5]

Each run records ``--pairs`` decision+outcome pairs (realistic rows: three candidates,
signals, an outcome with usage) into a fresh PostgreSQL schema through
:class:`gateway.store.Store` with the default settings (batches of 200 rows), and times
from the first ``record_*`` call until :meth:`Store.flush` returns, that is until every
row is committed. The queue is sized so that no row overflows to the journal: this
measures the database path. It also times the ``record_*`` calls themselves (what a
request pays), with the database up and with it unreachable (rows go to the journal).

``--write-cpu`` measures instead the CPU time (``time.process_time``) that
:func:`gateway.store.upsert.write_items` takes for one 200-row batch (100 pairs, in chunks
of the writer's ``CHUNK_ROWS``), SQLAlchemy's executemany against the driver-level path
(``driver_level``), interleaved batch by batch, on a SQLite file and on the PostgreSQL URL:
the writer thread's share of a one-core gateway's CPU.

URL: ``--database-url``, else ``MIXROUTE_TEST_DATABASE_URL``, else the local test server
``postgresql+psycopg://postgres@127.0.0.1:5432/test``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import tempfile
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from gateway.settings import Settings
from gateway.store import Store
from gateway.store.db import normalize_url
from router.records import DecisionRecord, OutcomeRecord

DEFAULT_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def _pair(i: int, run: str) -> tuple[DecisionRecord, OutcomeRecord]:
    rid = f"{run}-{i:07d}"
    now = datetime.now(timezone.utc)
    cands = [{"backend": b, "model": b, "predicted_quality": q, "expected_cost_usd": c,
              "expected_output_tokens": 180, "eligible": True, "note": None}
             for b, q, c in (("gpt-4o-mini", 0.82, 2.1e-4), ("llama-3.1-8b", 0.74, 4e-5), ("gpt-4o", 0.93, 3e-3))]
    dec = DecisionRecord(request_id=rid, route="auto", policy_hash="bench", chosen="gpt-4o-mini",
                         reason="cheapest_above_bar", candidates=cands, fallbacks=["gpt-4o"],
                         signals={"domain": "code", "difficulty": 0.41, "pii": False, "output_tokens": 180},
                         tenant="bench", prefix_hash="a1b2c3d4", created_at=now)
    out = OutcomeRecord(request_id=rid, backend="gpt-4o-mini", model="gpt-4o-mini", status="ok", http_status=200,
                        ttft_s=0.21, itl_s=0.012, latency_s=2.3, tokens_in=812, tokens_out=176, tokens_cached=512,
                        cost_usd=2.3e-4, streamed=True, created_at=now)
    return dec, out


def _schema_url(base: str, schema: str) -> str:
    return normalize_url(base).update_query_dict({"options": f"-csearch_path={schema}"}).render_as_string(
        hide_password=False)


async def _run_once(base: str, pairs: int, journal_dir: Path) -> tuple[float, list[float]]:
    """(pairs per second, record-call latencies in seconds) of one run in a fresh schema."""
    schema = f"mixroute_bench_{uuid.uuid4().hex[:10]}"
    admin = create_engine(normalize_url(base), poolclass=NullPool)
    with admin.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    records = [_pair(i, schema) for i in range(pairs)]
    try:
        settings = Settings(database_url=_schema_url(base, schema), store_queue_size=2 * pairs + 10)
        async with Store(settings, journal_dir / f"{schema}.jsonl") as store:
            calls: list[float] = []
            t0 = time.perf_counter()
            for n, (dec, out) in enumerate(records):
                c0 = time.perf_counter()
                store.record_decision(dec)
                store.record_outcome(out)
                calls.append(time.perf_counter() - c0)
                if n % 200 == 199:
                    await asyncio.sleep(0)  # like a server: the writer task runs between requests
            await store.flush()
            elapsed = time.perf_counter() - t0
            assert store.stats.written == 2 * pairs and store.stats.spilled == 0, store.stats
        return pairs / elapsed, calls
    finally:
        with admin.begin() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


async def _record_calls_when_down(pairs: int, journal_dir: Path) -> list[float]:
    """Record-call latencies (seconds) with the database unreachable (connection refused)."""
    settings = Settings(database_url="postgresql+psycopg://u@127.0.0.1:1/x?connect_timeout=1",
                        store_queue_size=2 * pairs + 10)
    calls: list[float] = []
    async with Store(settings, journal_dir / "down.jsonl") as store:
        for n, (dec, out) in enumerate(_pair(i, "down") for i in range(pairs)):
            c0 = time.perf_counter()
            store.record_decision(dec)
            store.record_outcome(out)
            calls.append(time.perf_counter() - c0)
            if n % 200 == 199:
                await asyncio.sleep(0)
        await store.flush()
    return calls


def _write_cpu(pg_url: str, rounds: int) -> None:
    from gateway.store.db import make_engine, upgrade
    from gateway.store.rows import as_row
    from gateway.store.upsert import write_items
    from gateway.store.writer import CHUNK_ROWS

    with tempfile.TemporaryDirectory() as tmp:
        schema = f"bench_{uuid.uuid4().hex[:8]}"
        admin = create_engine(normalize_url(pg_url), poolclass=NullPool)
        with admin.begin() as conn:
            conn.execute(text(f"CREATE SCHEMA {schema}"))
        try:
            for label, url in (("sqlite", f"sqlite:///{tmp}/store.db"), ("postgresql", _schema_url(pg_url, schema))):
                engine = make_engine(url)
                upgrade(engine)
                cpu: dict[bool, list[float]] = {False: [], True: []}
                for r in range(rounds):
                    for driver_level in (False, True):
                        items = [(t, as_row(rec)) for i in range(100)
                                 for t, rec in zip(("decisions", "outcomes"), _pair(i, f"{r}-{driver_level}"))]
                        t0 = time.process_time()
                        with engine.begin() as conn:
                            write_items(conn, items, chunk=CHUNK_ROWS, driver_level=driver_level)
                        cpu[driver_level].append(time.process_time() - t0)
                engine.dispose()
                sa, drv = statistics.median(cpu[False]) * 1e3, statistics.median(cpu[True]) * 1e3
                print(f"{label}: CPU per 200-row batch, median of {rounds}: SQLAlchemy executemany {sa:.2f} ms, "
                      f"driver level {drv:.2f} ms ({sa / drv:.2f}x)")
        finally:
            with admin.begin() as conn:
                conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
            admin.dispose()


def _us(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))] * 1e6


async def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--database-url", default=os.environ.get("MIXROUTE_TEST_DATABASE_URL", DEFAULT_URL))
    ap.add_argument("--pairs", type=int, default=20_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--unpaced", action="store_true",
                    help="write each batch in one statement per table, without the writer's pauses "
                         "(gateway.store.writer.CHUNK_ROWS), for an A/B of their cost")
    ap.add_argument("--write-cpu", action="store_true",
                    help="CPU per 200-row batch: SQLAlchemy executemany vs driver level, SQLite and PostgreSQL")
    args = ap.parse_args(argv)
    if args.write_cpu:
        _write_cpu(args.database_url, max(args.runs, 20))
        return
    if args.unpaced:
        import gateway.store.writer as writer

        writer.CHUNK_ROWS, writer.CHUNK_PAUSE_S = None, 0.0
    print(f"store writer benchmark: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.machine()}, "
          f"{os.cpu_count()} CPUs (load average {os.getloadavg()[0]:.1f}), Python {platform.python_version()}, "
          f"{normalize_url(args.database_url).render_as_string(hide_password=True)}")
    with tempfile.TemporaryDirectory() as tmp:
        rates, calls = [], []
        for run in range(args.runs):
            rate, c = await _run_once(args.database_url, args.pairs, Path(tmp))
            rates.append(rate)
            calls += c
            print(f"  run {run + 1}: {rate:,.0f} pairs/s")
        down = await _record_calls_when_down(min(args.pairs, 5_000), Path(tmp))
    print(f"median: {statistics.median(rates):,.0f} decision+outcome pairs/s "
          f"({args.runs} runs x {args.pairs:,} pairs, batches of {Settings().store_batch_size} rows"
          f"{', unpaced' if args.unpaced else ''})")
    print(f"record_decision+record_outcome call, database up:   p50 {_us(calls, 0.5):.1f} us, "
          f"p99 {_us(calls, 0.99):.1f} us")
    print(f"record_decision+record_outcome call, database down: p50 {_us(down, 0.5):.1f} us, "
          f"p99 {_us(down, 0.99):.1f} us")


if __name__ == "__main__":
    asyncio.run(main())
