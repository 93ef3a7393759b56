"""Overhead of the limit check: admit + settle against a local Redis (and in process).

Run: ``python -m bench.limits [--redis-url redis://127.0.0.1:6379/0] [--n 5000]``

Prints p50/p99 (ms) of one admit and one admit+settle pair, measured sequentially (one
request at a time, as seen by one request), for the in-process and the Redis limiter in
the same run. Target (issue 8): p99 under 1 ms against a local Redis.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid

from gateway.limits.base import Limits
from gateway.limits.memory import MemoryLimiter


def _pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] if len(values) > 1 else values[0]


async def _measure(limiter, n: int) -> dict[str, float]:
    limits = Limits(subject=f"bench-{uuid.uuid4().hex[:8]}", rpm=10**9, tpm=10**12, budget_usd=1e6, period="day")
    admit, pair = [], []
    for _ in range(200):  # warm-up: connections, script cache
        await limiter.settle(await limiter.admit(limits, 100, 0.001), 90, 0.0009)
    for _ in range(n):
        t0 = time.perf_counter()
        res = await limiter.admit(limits, 100, 0.001)
        t1 = time.perf_counter()
        await limiter.settle(res, 90, 0.0009)
        t2 = time.perf_counter()
        admit.append((t1 - t0) * 1e3)
        pair.append((t2 - t0) * 1e3)
    return {"admit_p50_ms": statistics.median(admit), "admit_p99_ms": _pct(admit, 99),
            "pair_p50_ms": statistics.median(pair), "pair_p99_ms": _pct(pair, 99)}


async def main(redis_url: str | None, n: int) -> list[dict]:
    rows = [{"limiter": "memory", **await _measure(MemoryLimiter(), n)}]
    if redis_url:
        from gateway.limits.redis import RedisLimiter

        lim = RedisLimiter(redis_url, prefix=f"bench-{uuid.uuid4().hex[:6]}")
        rows.append({"limiter": "redis", **await _measure(lim, n)})
        await lim.aclose()
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--n", type=int, default=5000)
    args = parser.parse_args()
    from rich.console import Console
    from rich.table import Table

    table = Table("limiter", "admit p50 ms", "admit p99 ms", "admit+settle p50 ms", "admit+settle p99 ms",
                  title=f"limit check overhead, n={args.n}, sequential")
    for row in asyncio.run(main(args.redis_url, args.n)):
        table.add_row(row["limiter"], *(f"{row[k]:.3f}" for k in
                                        ("admit_p50_ms", "admit_p99_ms", "pair_p50_ms", "pair_p99_ms")))
    Console().print(table)
