"""Off-policy evaluation against a real run: does ``policy what-if`` predict what another
policy realises?

1. **Exploration run.** ``--rows`` recorded prompts, shuffled with ``--seed`` (also the
   seed of exploration's draws, ``learning.seed``), are replayed
   one at a time through a local gateway serving the policy ``mixroute replay
   --write-policy`` generates (every model's ``quality`` prior = its mean recorded score;
   an ``auto`` route with ``route_target: 0.95``) with ``learning: {explore: E}``, each answer
   rated with its recorded score (as ``mixroute replay --feedback`` does). Its store is
   kept: every decision with the probability its choice had.
2. **Estimate.** ``mixroute policy what-if OTHER --logs STORE --json`` for each other
   policy (:data:`OTHERS`), whose realised mean score and cost per request come with 95%
   intervals, doubly robust and IPS (docs/LEARNING.md, "Off-policy evaluation").
3. **Real run.** The same prompts in the same order through a gateway serving OTHER
   (no ``learning:`` block: no exploration): realised quality (mean recorded score) and
   cost (mean recorded USD per request).

Prints, per policy and estimator, the estimate with its interval, the realised figure and
whether it lies inside, and per policy how many logged choices agree with its own (IPS
counts only those; where they are a dozen explored answers, the normal-approximation
interval rests on a dozen scores and can miss).

What makes the comparison fair: ``what-if`` re-decides each logged request on the
predictions the exploration run logged, so the real run must decide on the same ones.
Here they are the policy's priors in both: the classifier is off, the bars hold the
estimates themselves (``uncertainty_z: 0``: the exploration run's ``quality_sd`` is the
learning block's, which a run without one does not have), and the exploration run's outcome
memory is never refreshed (``MIXROUTE_LEARNING_REFRESH_S`` longer than the run), so its
feedback is logged for the estimate but does not move its predictions. A ``route_target``
bar decides by a window of earlier requests, so the real run and the re-decision each hold
their own window over the same prompts in the same order.

    python -m bench.offpolicy --data ../shared/data/routerbench --rows 1000 --seed 0 --out /tmp/offpolicy
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import yaml

from bench.learning_task import replay

#: The memory's refresh interval during the exploration run: longer than any run, so its
#: predictions stay the priors (module docstring).
FROZEN_REFRESH_S = 10**6
#: The estimators ``what-if --json`` reports under ``realised``, as printed.
ESTIMATORS = {"dr": "doubly robust", "ips": "IPS"}
#: The default share of exploring requests.
EXPLORE = 0.15


def _bar(target: float) -> Callable[[dict], dict]:
    def change(policy: dict) -> dict:
        for route in policy["routes"]:
            route["quality_bar"]["route_target"] = target
        return policy
    return change


def _without(backend: str) -> Callable[[dict], dict]:
    def change(policy: dict) -> dict:
        for route in policy["routes"]:
            route["backends"] = [b for b in route["backends"] if b != backend]
        return policy
    return change


#: The other policies: name -> a change of the exploration run's policy (its learning
#: block removed). The first re-runs the logging policy without exploration, the classic
#: check; the others change the bar or the candidate set.
OTHERS: dict[str, Callable[[dict], dict]] = {
    "same bar, no exploration": lambda p: p,
    "route_target 0.85": _bar(0.85),
    "without gpt-4-1106-preview": _without("gpt-4-1106-preview"),
}


def logging_policy(base: dict, explore: float, seed: int = 0) -> dict:
    """The exploration run's policy: ``base`` with every bar on the estimates themselves
    (``uncertainty_z: 0``) and ``learning: {explore, seed}`` (the seed of exploration's
    draws: without it every run would explore the same positions of its order the same way)."""
    policy = json.loads(json.dumps(base))
    for route in policy["routes"]:
        route["quality_bar"]["uncertainty_z"] = 0
    policy["learning"] = {"explore": explore, "seed": seed}
    return policy


def other_policy(logged: dict, change: Callable[[dict], dict]) -> dict:
    """An evaluated policy: the exploration run's without its learning block, changed."""
    policy = json.loads(json.dumps(logged))
    del policy["learning"]
    return change(policy)


def realised(report: dict) -> dict[str, float]:
    """``{"quality", "cost"}`` of a replay report: mean recorded score and mean recorded
    USD per answered request."""
    answered = [r for r in report["requests"] if r["model"] is not None]
    return {"quality": sum(r["score"] for r in answered) / len(answered),
            "cost": sum(r["cost_usd"] for r in answered) / len(answered)}


def estimates(whatif: dict) -> dict[tuple[str, str], dict]:
    """``(reward, estimator) -> {"value", "ci", "n"}`` from ``what-if --json``'s ``realised``
    (reward ``quality`` or ``cost``, estimator ``dr`` or ``ips``)."""
    out = {}
    for reward in ("quality", "cost"):
        for est in ESTIMATORS:
            got = (whatif.get("realised") or {}).get(f"{reward}_{est}")
            if got is not None:
                out[(reward, est)] = got
    return out


def table(rows: list[dict]) -> list[str]:
    """The printed table: one line per policy, reward and estimator. ``agree``: logged
    requests whose logged choice is the policy's (the only ones IPS counts)."""
    head = (f"{'policy':28s} {'agree':>5s} {'reward':8s} {'estimator':14s} {'estimate [95% interval]':>34s} "
            f"{'realised':>10s}  inside?")
    lines = [head, "-" * len(head)]
    for r in rows:
        fmt = ".3f" if r["reward"] == "quality" else ".3e"
        cell = f"{r['value']:{fmt}} [{r['ci'][0]:{fmt}}, {r['ci'][1]:{fmt}}]"
        lines.append(f"{r['policy']:28s} {r['agree']:5d} {r['reward']:8s} {ESTIMATORS[r['estimator']]:14s} "
                     f"{cell:>34s} {r['realised']:>10{fmt}}  {'yes' if r['inside'] else 'NO'}")
    return lines


def compare(name: str, whatif: dict, real: dict[str, float]) -> list[dict]:
    """One row per reward and estimator: the estimate, its interval, the realised figure,
    and how many logged choices agree with the policy's (``what-if``'s ``n`` x (1 - ``changed``))."""
    agree = round(whatif["n"] * (1 - whatif["changed"])) if whatif.get("changed") is not None else 0
    return [{"policy": name, "reward": reward, "estimator": est, "value": e["value"], "ci": e["ci"], "n": e["n"],
             "agree": agree, "realised": real[reward], "inside": e["ci"][0] <= real[reward] <= e["ci"][1]}
            for (reward, est), e in estimates(whatif).items()]


def what_if(policy: Path, store: Path, out: Path) -> dict:
    """``mixroute policy what-if POLICY --logs STORE --json OUT``'s document."""
    subprocess.run([sys.executable, "-m", "gateway.cli", "policy", "what-if", str(policy), "--logs", str(store),
                    "--json", str(out), "--bootstrap", "0"], check=True, stdout=subprocess.DEVNULL,
                   env={**os.environ, "MIXROUTE_CLASSIFIER": "off"})
    return json.loads(out.read_text())


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", action="append", required=True, help="outcome data file or folder; repeat for more")
    ap.add_argument("--rows", type=int, default=1000, help="prompts replayed (after the shuffle)")
    ap.add_argument("--seed", type=int, default=0, help="shuffles the prompts and seeds exploration's draws")
    ap.add_argument("--explore", type=float, default=EXPLORE, help="learning.explore of the exploration run")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    if args.rows < 1:
        sys.exit(f"--rows must be 1 or more, not {args.rows}")
    args.out.mkdir(parents=True, exist_ok=True)
    data = [Path(d) for d in args.data]
    generated = args.out / "generated.yaml"
    subprocess.run([sys.executable, "-m", "gateway.cli", "replay", *(a for d in args.data for a in ("--data", d)),
                    "--write-policy", str(generated)], check=True, env={**os.environ, "MIXROUTE_CLASSIFIER": "off"},
                   stdout=subprocess.DEVNULL)
    logged = logging_policy(yaml.safe_load(generated.read_text()), args.explore, args.seed)
    logged_path = args.out / "explore.yaml"
    logged_path.write_text(yaml.safe_dump(logged, sort_keys=False))
    store = args.out / "explore.db"
    for leftover in args.out.glob("explore.db*"):  # a fresh store: what-if reads every decision in it
        leftover.unlink()
    report = replay(data, logged_path, args.seed, True, FROZEN_REFRESH_S, 0.0, n=args.rows, store=store)
    (args.out / "explore.json").write_text(json.dumps(report))
    seen = realised(report)
    print(f"exploration run: {len(report['requests'])} prompts (seed {args.seed}), explore {args.explore}: "
          f"quality {seen['quality']:.3f}, cost {seen['cost']:.3e} USD per request")
    rows = []
    for i, (name, change) in enumerate(OTHERS.items()):
        path = args.out / f"other-{i}.yaml"
        path.write_text(yaml.safe_dump(other_policy(logged, change), sort_keys=False))
        estimate = what_if(path, store, args.out / f"other-{i}-whatif.json")
        report = replay(data, path, args.seed, False, FROZEN_REFRESH_S, 0.0, n=args.rows)
        (args.out / f"other-{i}.json").write_text(json.dumps(report))
        rows += compare(name, estimate, realised(report))
    for line in table(rows):
        print(line)
    inside = sum(r["inside"] for r in rows)
    print(f"inside the 95% interval: {inside} of {len(rows)}")
    bad = [r for r in rows if not all(math.isfinite(x) for x in (r["value"], *r["ci"]))]
    if bad:
        sys.exit(f"{len(bad)} estimate(s) not finite")
    (args.out / "offpolicy.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
