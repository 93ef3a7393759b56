"""A/B of mixroute's replica chooser settings (:class:`backends.vllm.affinity.AffinityChooser`
keyword arguments, e.g. ``holders``, ``min_bound``, ``load_factor``) on the prefix-cache
benchmark's workload (:mod:`bench.prefix_cache`), interleaved in one run.

Usage::

    python -m bench.prefix_holders_ab [--holders 1,2] [--seeds 7,8,9] [--repeats 2]
    python -m bench.prefix_holders_ab --variants "holders=2" "holders=2,min_bound=8"
    python -m bench.prefix_holders_ab --variants min_bound=4 min_bound=8 --think-s 0.1

For each repeat and seed, runs the ``tenants`` and ``volatile`` (rewriting on) scenarios with
mixroute's chooser once per variant (the order alternates between repeats) and prints each
hit rate and TTFT p90, then the median and mean per variant. About 3 minutes for two
variants with the defaults on a 2-core machine.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics

from backends.vllm.affinity import AffinityChooser
from bench.prefix_cache import Params, check_think_s, run_one, serve_replicas, workload


def parse_variant(text: str) -> dict[str, float]:
    """``"holders=2,min_bound=8"`` -> ``{"holders": 2, "min_bound": 8}`` (numbers only)."""
    out: dict[str, float] = {}
    for part in filter(None, text.split(",")):
        key, _, value = part.partition("=")
        out[key.strip()] = float(value) if "." in value else int(value)
    return out


async def ab(variants: list[str], seeds: list[int], repeats: int,
             concurrency: int = Params.concurrency, think_s: float = Params.think_s) -> dict[str, list[tuple[float, float]]]:
    """``(hit rate, TTFT p90 s)`` per run, per variant (``tenants`` and ``volatile`` pooled)."""
    res: dict[str, list[tuple[float, float]]] = {v: [] for v in variants}
    for rep in range(repeats):
        for seed in seeds:
            p = Params(seed=seed, concurrency=concurrency, think_s=think_s)
            servers = serve_replicas(p.replicas, p.model)
            sessions = workload(p)
            try:
                for v in (variants if rep % 2 == 0 else variants[::-1]):
                    for volatile in (False, True):
                        servers.reset()
                        row = await run_one(servers, sessions, p, AffinityChooser(**parse_variant(v)),
                                            rewriting=True, volatile=volatile)
                        res[v].append((row["hit_rate"], row["ttft_p90_s"]))
                        t, m = max(row["prompt_tokens"], 1), row["miss_tokens"]
                        print(f"repeat {rep} seed {seed} {'volatile' if volatile else 'tenants '} [{v}]: "
                              f"hit {row['hit_rate']:.3f} evicted {m['evicted'] / t:.3f} "
                              f"elsewhere {m['elsewhere'] / t:.3f} TTFT p90 {row['ttft_p90_s'] * 1e3:.0f} ms",
                              flush=True)
            finally:
                servers.stop()
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--holders", default="1,2", help="shorthand for --variants holders=1 holders=2")
    ap.add_argument("--variants", nargs="+", default=None, help="chooser settings, e.g. holders=2,min_bound=8")
    ap.add_argument("--seeds", default="7,8,9")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=Params.concurrency, help="sessions in flight at once")
    ap.add_argument("--think-s", type=float, default=Params.think_s,
                    help="mean pause between a session's turns, seconds (as bench.prefix_cache --think-s)")
    a = ap.parse_args()
    check_think_s(ap, a.think_s)
    variants = a.variants or [f"holders={h}" for h in a.holders.split(",")]
    res = asyncio.run(ab(variants, [int(x) for x in a.seeds.split(",")], a.repeats, a.concurrency, a.think_s))
    for v, runs in res.items():
        hits, p90 = [r[0] for r in runs], [r[1] * 1e3 for r in runs]
        print(f"[{v}]: {len(runs)} runs, hit rate median {statistics.median(hits):.3f} mean "
              f"{statistics.mean(hits):.3f} (min {min(hits):.3f}, max {max(hits):.3f}); TTFT p90 median "
              f"{statistics.median(p90):.0f} ms")


if __name__ == "__main__":
    main()
