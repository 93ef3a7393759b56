"""Decision latency without the classifier: ``Router.decide`` over a route of N candidates.

Run: ``python -m bench.decision [--candidates 20] [--n 20000] [--bar target,route_target,route_target:share]
[--cost-mode expected,hard]``

The predictor is the prior baseline (a dict lookup), so the figure is the engine itself:
rewrite + rules + cost model + live TTFT + choice. Prints p50/p99 in milliseconds over
sequential decisions of a ~100-token chat request with a system prompt. Target (issue 4):
p99 under 0.5 ms with 20 candidates. ``--bar`` compares quality bars side by side (each
at 0.95); ``route_target`` adds its controller's update (:mod:`router.aggregate`; the
default ``lagrangian`` allocation, or ``route_target:share``), here in its worst case:
quality rises concavely with cost (``0.5 + 0.4 sqrt(i / N)``), so every candidate is on
the cost-quality frontier and on its upper concave hull, and each request adds N - 1 steps.
``--cost-mode hard`` makes the route's cost rule (``max_cost_usd: 0.0005``) a ceiling
(``max_cost_mode: hard``): every candidate is then sent an output-token limit (15 of 20
candidates below the request's expected length, so their expected cost is recomputed too).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from router.engine import Router, RoutingRequest
from router.policy import parse_policy


def policy(n: int, bar: str = "target", cost_mode: str = "expected") -> str:
    lines = ["version: 1", "backends:"]
    for i in range(n):
        lines.append(f"  - {{name: b{i}, kind: fake, model: m{i}, quality: {0.5 + 0.4 * ((i + 1) / n) ** 0.5:.4f}, "
                     f"pricing: {{input_per_1m: {0.1 * (i + 1):.2f}, output_per_1m: {0.3 * (i + 1):.2f}}}}}")
    names = ", ".join(f"b{i}" for i in range(n))
    kind, _, allocation = bar.partition(":")
    extra = f", allocation: {allocation}" if allocation else ""
    lines += ["routes:", f"  - {{name: auto, backends: [{names}], quality_bar: {{{kind}: 0.95{extra}}}, ttft_slo_s: 2.0}}",
              "rules:", "  - {name: cap, max_cost_usd: 1.0}" if cost_mode == "expected"
              else "  - {name: cap, max_cost_usd: 0.0005, max_cost_mode: hard}"]
    return "\n".join(lines) + "\n"


async def measure(n_candidates: int, n: int, bar: str = "target", cost_mode: str = "expected") -> tuple[float, float]:
    router = Router(parse_policy(policy(n_candidates, bar, cost_mode)))
    body = {"model": "auto", "messages": [
        {"role": "system", "content": "You are a concise assistant. Current time: 2026-11-30T12:00:00Z."},
        {"role": "user", "content": "Explain in two sentences why the sky is blue, and cite one source. " * 4}]}
    for _ in range(500):
        await router.decide(RoutingRequest("chat", dict(body)))
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        await router.decide(RoutingRequest("chat", dict(body)))
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), statistics.quantiles(times, n=100)[98]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=20)
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--bar", default="target", help="comma-separated: target, route_target, route_target:share, "
                                                        "route_target:lagrangian, min_quality")
    parser.add_argument("--cost-mode", default="expected", help="comma-separated: expected (max_cost_usd 1.0, never "
                                                                 "binding), hard (max_cost_usd 0.0005, a ceiling)")
    args = parser.parse_args()
    modes = [m.strip() for m in args.cost_mode.split(",")]
    if not set(modes) <= {"expected", "hard"}:
        parser.error(f"--cost-mode: expected or hard, got {args.cost_mode!r}")
    for c in sorted({1, 5, args.candidates}):
        for bar in args.bar.split(","):
            for mode in modes:
                p50, p99 = asyncio.run(measure(c, args.n, bar.strip(), mode))
                print(f"candidates={c:3d}  bar={bar.strip():12s}  cost={mode:8s}  decide p50 {p50:.3f} ms  "
                      f"p99 {p99:.3f} ms  (n={args.n})")


if __name__ == "__main__":
    main()
