"""A new model, cold: does the outcome memory learn a model it has no data on?

Three replays of the same recorded prompts in the same random order, through local
gateways serving the policy ``mixroute replay --write-policy`` generates (every model's
``quality`` prior = its mean recorded score), on a ``route_target`` bar held on the
estimates themselves (``uncertainty_z: 0``, so that the three runs differ only in what they
know):

- ``full``: every prior known, no learning;
- ``cold``: ``--model`` loses its prior (the gateway assumes 0.5), no learning;
- ``learning``: as ``cold``, with ``learning: {explore: E}`` (the known priors counted as
  ``--known-weight`` observations each, ``prior_weights``), each answer rated with its
  recorded score (as ``mixroute replay --feedback`` does), the prompts ``--pace`` seconds
  apart and the memory refreshed every ``--refresh`` seconds
  (:func:`bench.learning_task.replay`: unpaced, the memory changed a few times per run).

Prints realised quality (mean recorded score) and cost (USD per 100 requests) per block of
requests and the convergence point (:func:`convergence`: after how many requests the
learning run is, and stays, within 2 quality points and 10% cost of the full run), writes
each run's report and a PNG of both per 100 requests. The memory is
refreshed on wall-clock time, so a learning run differs from one run to the next. The classifier is off: the priors are
the only research estimates, so this measures the memory and exploration alone.

    python -m bench.learning_cold --data ../shared/data/routerbench --out /tmp/cold
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from bench.learning_task import replay

RUNS = ("full", "cold", "learning")


def policies(base: dict, model: str, explore: float, known_weight: float) -> dict[str, dict]:
    """The three policies (module docstring) from the generated one."""
    out = {}
    for run in RUNS:
        policy = json.loads(json.dumps(base))
        for route in policy["routes"]:
            route["quality_bar"]["uncertainty_z"] = 0
        if run != "full":
            [b] = [b for b in policy["backends"] if b["name"] == model]
            del b["quality"]
        if run == "learning":
            # The known priors are means over every recorded row: they count as
            # `known_weight` observations (a research estimate's cap by default); the cold
            # model's assumed 0.5 as the default prior_weight.
            policy["learning"] = {"explore": explore, "prior_weights": {
                b["name"]: known_weight for b in policy["backends"] if b["name"] != model}}
        out[run] = policy
    return out


def blocks(report: dict, size: int) -> list[tuple[float, float]]:
    """``(mean score, cost USD per 100 requests)`` per block of ``size`` requests, in the
    order sent; a last block shorter than half of ``size`` joins the one before."""
    reqs = [r for r in report["requests"] if r["model"] is not None]
    edges = list(range(0, len(reqs), size)) + [len(reqs)]
    if len(edges) > 2 and edges[-1] - edges[-2] < size / 2:
        del edges[-2]
    out = []
    for lo, hi in zip(edges, edges[1:]):
        part = reqs[lo:hi]
        out.append((sum(r["score"] for r in part) / len(part), 100 * sum(r["cost_usd"] for r in part) / len(part)))
    return out


def convergence(learning: dict, full: dict, *, window: int = 500, step: int = 100, quality_points: float = 0.02,
                cost_share: float = 0.10) -> int | None:
    """After how many requests the learning run is within ``quality_points`` of the full
    run's realised quality and ``cost_share`` of its cost, and stays there: the first
    checkpoint ``n`` (every ``step`` requests, from ``window`` on) from which, at every later
    checkpoint, the learning run's mean score over the last ``window`` requests is at least
    the full run's over the same requests minus ``quality_points``, and its cost over them at
    most ``1 + cost_share`` times the full run's. Both runs sent the same prompts in the same
    order, so each window compares the same requests (better quality or a lower cost than
    the full run always counts as within). ``None``: not within at the last checkpoint."""
    answered = {r["row"]: r for r in full["requests"] if r["model"] is not None}
    pairs = [(r, answered[r["row"]]) for r in learning["requests"] if r["model"] is not None and r["row"] in answered]
    ok_at: list[tuple[int, bool]] = []
    for n in range(window, len(pairs) + 1, step):
        part = pairs[n - window:n]
        q_l, q_f = (sum(p[i]["score"] for p in part) / window for i in (0, 1))
        c_l, c_f = (sum(p[i]["cost_usd"] for p in part) for i in (0, 1))
        ok_at.append((n, q_l >= q_f - quality_points and c_l <= (1 + cost_share) * c_f))
    first = None
    for n, ok in ok_at:
        first = (first or n) if ok else None
    return first


def plot(reports: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (q, c) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for run, report in reports.items():
        per100 = blocks(report, 100)
        x = [100 * (i + 1) for i in range(len(per100))]
        q.plot(x, [b[0] for b in per100], label=run)
        c.plot(x, [b[1] for b in per100], label=run)
    q.set_ylabel("quality per 100 requests")
    c.set_ylabel("cost per 100 requests (USD)")
    c.set_xlabel("requests")
    q.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", action="append", required=True)
    ap.add_argument("--model", default="zero-one-ai/Yi-34B-Chat", help="the model that starts cold")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--explore", type=float, default=0.05)
    ap.add_argument("--known-weight", type=float, default=50.0, help="prior_weights of the models with a prior")
    ap.add_argument("--refresh", type=float, default=0.05, help="MIXROUTE_LEARNING_REFRESH_S of the gateway")
    ap.add_argument("--pace", type=float, default=0.05, help="seconds between two prompts of the learning run")
    ap.add_argument("--block", type=int, default=500, help="requests per printed block")
    ap.add_argument("--window", type=int, default=500, help="requests compared for the convergence point")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    generated = args.out / "generated.yaml"
    subprocess.run([sys.executable, "-m", "gateway.cli", "replay", *(a for d in args.data for a in ("--data", d)),
                    "--write-policy", str(generated)], check=True, env={**os.environ, "MIXROUTE_CLASSIFIER": "off"},
                   stdout=subprocess.DEVNULL)
    reports = {}
    for run, policy in policies(yaml.safe_load(generated.read_text()), args.model, args.explore, args.known_weight).items():
        path = args.out / f"{run}.yaml"
        path.write_text(yaml.safe_dump(policy, sort_keys=False))
        learning = run == "learning"
        reports[run] = replay([Path(d) for d in args.data], path, args.seed, learning, args.refresh,
                              args.pace if learning else 0.0)
        (args.out / f"{run}.json").write_text(json.dumps(reports[run]))
    plot(reports, args.out / "learning_cold.png")
    print(f"blocks of {args.block} requests: quality (mean recorded score) / cost (USD per 100 requests) / "
          f"share of {args.model}")
    for run, report in reports.items():
        reqs = [r for r in report["requests"] if r["model"] is not None]
        cells = []
        for i, (quality, cost) in enumerate(blocks(report, args.block)):
            part = reqs[i * args.block:(i + 1) * args.block]
            share = sum(r["model"] == args.model for r in part) / len(part)
            cells.append(f"{quality:.3f}/{cost:.3f}/{share:.0%}")
        per100 = 100 * report["cost_usd"] / len(reqs)
        print(f"{run:9s} " + "  ".join(cells) + f"   all {report['quality']:.3f}/{per100:.3f}")
    n = convergence(reports["learning"], reports["full"], window=args.window)
    where = (f"from request {n} on" if n is not None else "not by the last request")
    print(f"learning within 2 quality points and 10% cost of full (trailing {args.window} requests): {where}")
    print(f"wrote {args.out / 'learning_cold.png'}")


if __name__ == "__main__":
    main()
