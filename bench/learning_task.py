"""A new task: does the outcome memory learn a task its estimates were not made on?

The estimates are made without the task: every model's ``quality`` prior is its mean
recorded score on the other files of ``--data`` (``mixroute replay --write-policy`` on them).
Then the task's rows are replayed in one random order (``--seed``) through local gateways,
once per ``willingness_to_pay`` bar of a grid (``--wtp``: USD per unit of quality, so one
run per point of a quality-cost curve), in two conditions:

- ``no-learning``: the priors only;
- ``learning``: ``learning: {explore: E}``, every prior counted as ``--prior-weight``
  observations (``prior_weights``), each answer rated with its recorded score on
  ``/v1/feedback`` (as ``mixroute replay --feedback`` does), the prompts ``--pace`` seconds
  apart and the memory refreshed every ``--refresh`` seconds (:func:`replay`).

On the second half of each run (in the order sent), a run is one point: realised quality
(mean recorded score) and cost (mean recorded USD per request). Each condition's AIQ is
the RouterBench area under the non-decreasing convex hull of its points, normalised by the
cost range of the single models on the same rows (:func:`router.eval.metrics.aiq`); the
zero router's is that of the single models' own points. The issue's target: the learning
router's AIQ at least the zero router's and above the no-learning run's.

The classifier is off: the priors are the only estimates, one number per model, so the
routed runs cannot tell one prompt of the task from another, and the zero router, which
mixes models, bounds what they can reach. The measurement with heads trained without the
task's rows is not this one. The memory is refreshed on wall-clock time, so a learning run
differs from one run to the next.

    python -m bench.learning_task --data ../shared/data/routerbench --task mbpp --out /tmp/task
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import yaml

from backends.data import load
from backends.replay.score import call_cost
from router.eval.metrics import aiq

CONDITIONS = ("no-learning", "learning")
WTP = (1e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0, 3.0)


def task_files(data: Path, task: str) -> tuple[list[Path], list[Path]]:
    """``(the task's files, the other files)`` of a data folder (or a single file's folder):
    a file is the task's when its name contains ``task``."""
    files = sorted(p for p in (data.iterdir() if data.is_dir() else [data]) if p.suffix in (".csv", ".json", ".jsonl"))
    mine = [p for p in files if task in p.name]
    return mine, [p for p in files if p not in mine]


def policy_for(base: dict, condition: str, wtp: float, explore: float, prior_weight: float, lookup: list[str]) -> dict:
    """The generated policy under a ``willingness_to_pay`` bar, with ``lookup`` as every
    backend's data (the task's prompts must be found) and, for ``learning``, the block."""
    policy = json.loads(json.dumps(base))
    for b in policy["backends"]:
        b["data"] = lookup
    for route in policy["routes"]:
        route["quality_bar"] = {"willingness_to_pay": wtp}
    if condition == "learning":
        policy["learning"] = {"explore": explore, "prior_weights": {b["name"]: prior_weight
                                                                    for b in policy["backends"]}}
    return policy


def second_half(report: dict) -> list[dict]:
    """The answered requests of the second half of a run, in the order sent."""
    reqs = report["requests"]
    return [r for r in reqs[len(reqs) // 2:] if r["model"] is not None]


def point(requests: list[dict]) -> tuple[float, float]:
    """``(mean cost USD, mean score)`` of some requests."""
    return (sum(r["cost_usd"] for r in requests) / len(requests), sum(r["score"] for r in requests) / len(requests))


def single_models(rows: list, indices: list[int], prices: dict[str, float]) -> dict[str, tuple[float, float]]:
    """Model -> ``(mean cost, mean score)`` over the rows ``indices`` (the zero router's points)."""
    models = sorted({m for i in indices for m in rows[i].scores})
    out = {}
    for m in models:
        part = [rows[i] for i in indices if m in rows[i].scores]
        out[m] = (sum(call_cost(r, m, prices) for r in part) / len(part), sum(r.scores[m] for r in part) / len(part))
    return out


def aiqs(points: dict[str, list[tuple[float, float]]], singles: dict[str, tuple[float, float]]) -> dict[str, float]:
    """AIQ of each condition's points and of the zero router, over the single models' cost range."""
    c = np.array([p[0] for p in singles.values()])
    lo, hi = float(c.min()), float(c.max())
    out = {"zero router": aiq(c, np.array([p[1] for p in singles.values()]), lo, hi)}
    for name, pts in points.items():
        out[name] = aiq(np.array([p[0] for p in pts]), np.array([p[1] for p in pts]), lo, hi)
    return out


def replay(files: list[Path], policy: Path, seed: int, feedback: bool, refresh: float, pace: float, *,
           n: int | None = None, store: Path | None = None) -> dict:
    """Replay the task's rows (the first ``n`` after the shuffle, default all) through a
    local gateway serving ``policy``, one at a time, ``pace`` seconds apart (with
    ``feedback``: each answer rated before the pause), and return the report ``mixroute
    replay --json`` writes. With ``store``, the gateway's SQLite store is that file, kept.

    Why paced, and not ``mixroute replay --feedback``: a replay sends a prompt every few
    milliseconds, faster than the gateway's store flushes and its memory refreshes (a
    refresh may wait a second for SQLite's write lock under that load), so the memory
    would change a handful of times per run; paced, it is at most a few requests behind.
    """
    import httpx

    from gateway.commands.replay import prepare, send_one
    from gateway.commands.replay_gateway import local_gateway
    from gateway.commands.replay_report import build_report

    os.environ.update({"MIXROUTE_CLASSIFIER": "off", "MIXROUTE_LEARNING_REFRESH_S": str(refresh),
                       "MIXROUTE_STORE_FLUSH_INTERVAL_S": str(min(refresh, 0.2))})
    plan, rows = prepare(files, n=n, seed=seed)

    async def run(url: str) -> list:
        answered = []
        async with httpx.AsyncClient(base_url=url, timeout=300) as client:
            for row in rows:
                answered.append(await send_one(client, plan, row, "auto", feedback))
                if pace:
                    await asyncio.sleep(pace)
        return answered

    with local_gateway(plan, policy=policy, store=store) as url:
        answered = asyncio.run(run(url))
    report = build_report(plan, answered)
    failed = [a.error for a in answered if a.error] + [a.feedback_error for a in answered if a.feedback_error]
    if failed:
        sys.exit(f"{policy}: {len(failed)} requests or ratings failed; first: {failed[0]}")
    return report


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True, help="a folder of outcome files, one per task")
    ap.add_argument("--task", default="mbpp", help="the new task: the files whose name contains it")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--explore", type=float, default=0.05)
    ap.add_argument("--prior-weight", type=float, default=5.0, help="observations each prior counts as")
    ap.add_argument("--refresh", type=float, default=0.05, help="MIXROUTE_LEARNING_REFRESH_S of the gateway")
    ap.add_argument("--pace", type=float, default=0.05, help="seconds between two prompts of a learning run")
    ap.add_argument("--wtp", type=float, nargs="+", default=list(WTP), help="willingness_to_pay bars (USD)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    mine, others = task_files(args.data, args.task)
    if not mine or not others:
        sys.exit(f"{args.data}: need files of task {args.task!r} and of other tasks")
    generated = args.out / "generated.yaml"
    subprocess.run([sys.executable, "-m", "gateway.cli", "replay", *(a for f in others for a in ("--data", str(f))),
                    "--write-policy", str(generated)], check=True, env={**os.environ, "MIXROUTE_CLASSIFIER": "off"},
                   stdout=subprocess.DEVNULL)
    base = yaml.safe_load(generated.read_text())
    points: dict[str, list[tuple[float, float]]] = {c: [] for c in CONDITIONS}
    report = {}
    print(f"task {args.task}: priors from {', '.join(p.name for p in others)}; second half of each run")
    print(f"{'wtp (USD)':>10s}  " + "  ".join(f"{c:>22s}" for c in CONDITIONS) + "   (quality / USD per 100 requests)")
    for wtp in args.wtp:
        cells = []
        for condition in CONDITIONS:
            path = args.out / f"{condition}-{wtp:g}.yaml"
            path.write_text(yaml.safe_dump(policy_for(base, condition, wtp, args.explore, args.prior_weight,
                                                      [str(args.data)]), sort_keys=False))
            learning = condition == "learning"
            report = replay(mine, path, args.seed, learning, args.refresh, args.pace if learning else 0.0)
            (args.out / f"{condition}-{wtp:g}.json").write_text(json.dumps(report))
            cost, quality = point(second_half(report))
            points[condition].append((cost, quality))
            cells.append(f"{quality:.3f} / {100 * cost:.4f}")
        print(f"{wtp:10.0e}  " + "  ".join(f"{c:>22s}" for c in cells))
    rows = [r for f in mine for r in load(f).rows]
    indices = [r["row"] for r in report["requests"]][len(report["requests"]) // 2:]
    singles = single_models(rows, indices, report["price_per_call_usd"])
    result = aiqs(points, singles)
    print("AIQ (second half, normalised by the single models' cost range): "
          + ", ".join(f"{k} {v:.4f}" for k, v in result.items()))
    met = result["learning"] >= result["zero router"] and result["learning"] > result["no-learning"]
    print(f"target (learning >= zero router and > no-learning): {'met' if met else 'not met'}")
    (args.out / "learning_task.json").write_text(json.dumps({"aiq": result, "points": points, "singles": singles},
                                                            indent=2))


if __name__ == "__main__":
    main()
