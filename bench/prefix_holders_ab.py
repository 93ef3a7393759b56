"""A/B of the affinity table's ``prefix_holders`` (replicas remembered per prefix block) on
the prefix-cache benchmark's workload (:mod:`bench.prefix_cache`), interleaved in one run.

Usage::

    python -m bench.prefix_holders_ab [--holders 1,2] [--seeds 7,8,9] [--repeats 2]

For each repeat and seed, runs the ``tenants`` and ``volatile`` (rewriting on) scenarios with
mixroute's chooser once per holder count (the order alternates between repeats) and prints
each hit rate, then the median and mean per holder count. About 3 minutes with the
defaults on a 2-core machine.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics

from backends.vllm.affinity import AffinityChooser
from bench.prefix_cache import Params, run_one, serve_replicas, workload


async def ab(holders: list[int], seeds: list[int], repeats: int) -> dict[int, list[float]]:
    """Hit rates per holder count (``tenants`` and ``volatile`` runs pooled)."""
    res: dict[int, list[float]] = {h: [] for h in holders}
    for rep in range(repeats):
        for seed in seeds:
            p = Params(seed=seed)
            servers = serve_replicas(p.replicas, p.model)
            sessions = workload(p)
            try:
                for h in (holders if rep % 2 == 0 else holders[::-1]):
                    for volatile in (False, True):
                        servers.reset()
                        row = await run_one(servers, sessions, p, AffinityChooser(holders=h), rewriting=True,
                                            volatile=volatile)
                        res[h].append(row["hit_rate"])
                        t, m = max(row["prompt_tokens"], 1), row["miss_tokens"]
                        print(f"repeat {rep} seed {seed} {'volatile' if volatile else 'tenants '} holders {h}: "
                              f"hit {row['hit_rate']:.3f} evicted {m['evicted'] / t:.3f} "
                              f"elsewhere {m['elsewhere'] / t:.3f}", flush=True)
            finally:
                servers.stop()
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--holders", default="1,2")
    ap.add_argument("--seeds", default="7,8,9")
    ap.add_argument("--repeats", type=int, default=2)
    a = ap.parse_args()
    res = asyncio.run(ab([int(x) for x in a.holders.split(",")], [int(x) for x in a.seeds.split(",")], a.repeats))
    for h, v in res.items():
        print(f"holders {h}: {len(v)} runs, hit rate median {statistics.median(v):.3f} mean {statistics.mean(v):.3f} "
              f"(min {min(v):.3f}, max {max(v):.3f})")


if __name__ == "__main__":
    main()
