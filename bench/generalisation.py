"""How well the gateway's quality estimate generalises: grouped k-fold and leave-one-task-out
cross-validation of the ``mixroute``, ``knn`` and ``zero`` routers, with the metrics
``mixroute eval`` reports (APGR on the two-model RouteLLM sets, AIQ on RouterBench).

    python -m bench.generalisation [DATA] [--quick] [--scheme kfold,loso] [--folds 5]
        [--seeds 1] [--rows unseen|all] [--cache-dir DIR] [--json OUT.json]

Why: a figure measured on one split of the same files the estimate was tuned on says little
about rows the router has never seen (issue 38). Here every figure is a mean over folds with
its standard deviation, and the estimate is rebuilt per fold from the rows outside it.

What is rebuilt per fold. The gateway's estimate is the shipped ``quality`` head blended
with the outcome memory (:mod:`router.classify.memory`). The memory is rebuilt per fold with
the project's own :func:`router.classify.memory.build` and the shipped memory's settings
(``dims``, ``k``, ``kappa``, ``task_smoothing``) from the pool rows outside the fold
(every source of ``DATA``, RouterDC included); the head stays the shipped one, since
refitting it per fold costs the whole training run. So that the head is not scored on its
own training rows, only the rows the shipped head did not train on (its ``calib`` and
``test`` splits, :func:`router.classify.data.split_of`, about 20%) are scored
(``--rows unseen``, the default; ``--rows all`` scores every row and is optimistic for
``mixroute``). ``knn`` (:mod:`router.eval.routers.knn`) is fit on the rows of the same
dataset outside the fold, as ``mixroute eval`` cross-fits it; ``zero`` needs no fit. The
routers, sweeps and metrics are ``mixroute eval``'s own (:mod:`router.eval.routers`,
:func:`router.eval.summary.summarise`).

Schemes:

- ``kfold``: prompts are grouped (same normalised text, or embeddings at least
  :data:`bench.generalisation_parts.DUPLICATE` similar: near duplicates, also across
  sources) and the groups are cut into ``--folds`` folds by a seeded hash; fold ``f``'s
  rows are scored with a memory of every other fold. ``--seeds`` repeats it with other
  fold assignments.
- ``loso`` (leave one task out): for each scored task (RouteLLM MMLU, GSM8K; RouterBench
  arc-challenge, mbpp, winogrande) the memory holds no row of that task nor any near
  duplicate of one (so RouterDC's GSM8K leaves with RouteLLM's only if its prompts are
  near duplicates), and ``knn`` is fit on the other tasks with the same models (MMLU <->
  GSM8K; each RouterBench task on the other two): prompts unlike any in the memory, as
  MT-Bench's conversations are. The task's rows are still cut into the same folds for a
  spread. The head has seen the task (other rows of it), so this isolates the memory.

``--quick`` scores at most ``--max-test`` rows per dataset and fold (default 60) with one
fold seed: a few minutes on 2 cores once the encoder pass is cached (the first run pays one
encoder pass over every prompt of ``DATA``, about 4 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench.generalisation_parts import FoldPredictor, HeadSignals, Signals, duplicate_groups, fold_memory, group_folds
from router.classify.data import load_rows, split_of
from router.eval import routers as registry
from router.eval.data import EvalData, load_eval_data
from router.eval.routers.base import Context
from router.eval.summary import summarise

#: name -> (path under DATA, metric, the (source, task family) of its rows).
SETS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "mmlu": ("routellm/mmlu", "apgr", ("routellm/mmlu",)),
    "gsm8k": ("routellm/gsm8k", "apgr", ("routellm/gsm8k",)),
    "arc_challenge": ("routerbench/arc_challenge_train.csv", "aiq", ("routerbench/arc-challenge",)),
    "mbpp": ("routerbench/mbpp_train.csv", "aiq", ("routerbench/mbpp",)),
    "winogrande": ("routerbench/winograde_train.csv", "aiq", ("routerbench/winogrande",)),
    "routerbench_mixed": ("routerbench", "aiq", ("routerbench/arc-challenge", "routerbench/mbpp",
                                                  "routerbench/winogrande")),
}
#: The datasets each held-out task's ``knn`` learns from in ``loso`` (same models, other tasks).
LOSO_TRAIN = {"mmlu": ["gsm8k"], "gsm8k": ["mmlu"], "arc_challenge": ["mbpp", "winogrande"],
              "mbpp": ["arc_challenge", "winogrande"], "winogrande": ["arc_challenge", "mbpp"]}
#: The zero router's AIQ on the whole RouterBench train files (``../shared/data/README.md``).
REFERENCE_ZERO_AIQ = {"arc_challenge": 0.9172, "mbpp": 0.6580, "winogrande": 0.8004}
ROUTERS = ("zero", "knn", "mixroute")


@dataclass
class Pool:
    """Every row of ``DATA`` (:func:`router.classify.data.load_rows`) with its head outputs,
    embedding, task unit, near-duplicate group, and the scored datasets as ``EvalData``."""

    rows: list[Any]
    units: np.ndarray
    groups: np.ndarray
    index: dict[str, int]
    sets: dict[str, EvalData]
    signals: HeadSignals
    sig: Signals
    embed: Callable[[list[str]], np.ndarray] = field(repr=False, default=None)


def load_pool(data: Path, signals: HeadSignals, names: list[str]) -> Pool:
    rows = load_rows(data)
    texts = [r.text for r in rows]
    sig = signals(texts)
    units = np.array([f"{r.source}/{r.task.split(':', 1)[0]}" for r in rows])
    groups = duplicate_groups(texts, sig.emb)
    index = {t: i for i, t in reversed(list(enumerate(texts)))}
    sets = {n: load_eval_data(data / SETS[n][0]) for n in names}
    return Pool(rows, units, groups, index, sets, signals, sig, lambda ts: signals(ts).emb)


def reference_zero(sets: dict[str, EvalData]) -> dict[str, float]:
    """The zero router's AIQ on each whole RouterBench file (no fold), to check the metric
    code against :data:`REFERENCE_ZERO_AIQ`."""
    out = {}
    for name in REFERENCE_ZERO_AIQ:
        if name in sets:
            data = sets[name]
            out[name] = summarise(data, registry.get("zero").run(data, Context()), bootstrap=0).values["aiq"]
    return out


def run_fold(pool: Pool, name: str, scheme: str, fold: np.ndarray, f: int, args: argparse.Namespace,
             memories: dict[Any, Any]) -> dict[str, float | None] | None:
    """The metric of each router on dataset ``name``'s rows in fold ``f`` (``None``: no rows)."""
    data = pool.sets[name]
    units = SETS[name][2]
    pidx = np.array([pool.index[p] for p in data.prompts])
    scored = fold[pidx] == f
    if args.rows == "unseen":
        scored &= np.array([split_of(p) != "train" for p in data.prompts])
    test_idx = np.flatnonzero(scored)
    if args.max_test and len(test_idx) > args.max_test:
        test_idx = np.sort(np.random.default_rng([args.seed, f]).choice(test_idx, args.max_test, replace=False))
    if len(test_idx) < 2:
        return None
    test = data.subset(test_idx)
    if scheme == "kfold":
        key = ("kfold", f)
        knn_train = data.subset(np.flatnonzero(fold[pidx] != f))
    else:
        key = ("loso", units)
        others = [pool.sets[o].restrict_models(data.models) for o in LOSO_TRAIN[name] if o in pool.sets]
        knn_train = _concat(others) if others else None
    if key not in memories:
        memories.clear()  # one memory at a time: they are rebuilt in a few seconds
        memories[key] = fold_memory(pool.rows, _memory_rows(pool, scheme, fold, f, units), pool.sig, args.like)
    memory = memories[key]
    out: dict[str, float | None] = {"n": float(test.n)}
    for r in args.routers:
        if r == "knn" and knn_train is None:  # loso without another task of the same models
            out[r] = None
            continue
        router = registry.get(r)
        options = {"predictor": FoldPredictor(pool.signals, memory)} if r == "mixroute" else {}
        ctx = Context(train=knn_train if r == "knn" else None, embed=pool.embed, seed=args.seed, options=options)
        res = summarise(test, router.run(test, ctx), bootstrap=0)
        out[r] = res.values[SETS[name][1]]
    return out


def _memory_rows(pool: Pool, scheme: str, fold: np.ndarray, f: int, units: tuple[str, ...]) -> np.ndarray:
    """Pool rows the fold's memory may hold: outside fold ``f`` (kfold), or outside the
    held-out task and every duplicate group that touches it (loso)."""
    if scheme == "kfold":
        return fold != f
    held = np.isin(pool.units, units)
    return ~np.isin(pool.groups, np.unique(pool.groups[held]))


def _concat(parts: list[EvalData]) -> EvalData:
    first = parts[0]
    return EvalData("+".join(p.name for p in parts), first.path, list(first.models),
                    [x for p in parts for x in p.prompts], np.concatenate([p.scores for p in parts]),
                    np.concatenate([p.costs for p in parts]), first.price_source)


def summarise_folds(per_fold: list[dict[str, float | None]], routers: list[str]) -> dict[str, Any]:
    """Mean and sample sd over folds of each router's metric and of ``mixroute``'s paired
    differences with ``knn`` and ``zero`` (the same rows in each fold)."""
    out: dict[str, Any] = {"folds": len(per_fold), "rows": int(sum(p["n"] for p in per_fold))}
    series = {r: [p[r] for p in per_fold if p.get(r) is not None] for r in routers}
    if "mixroute" in routers:
        for base in ("knn", "zero"):
            if base in routers:
                series[f"mixroute-{base}"] = [p["mixroute"] - p[base] for p in per_fold
                                              if p.get("mixroute") is not None and p.get(base) is not None]
    for k, v in series.items():
        a = np.array(v, float)
        out[k] = {"mean": round(float(a.mean()), 4) if a.size else None,
                  "sd": round(float(a.std(ddof=1)), 4) if a.size > 1 else None}
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    from router.classify import default_adapters_dir
    from router.classify.memory import MEMORY_FILE, OutcomeMemory

    adapters = args.adapters or default_adapters_dir()
    args.like = OutcomeMemory.load(adapters / "quality" / MEMORY_FILE)
    started = time.time()
    signals = HeadSignals(args.cache_dir, args.adapters, progress=_progress if args.verbose else None)
    pool = load_pool(args.data, signals, args.sets)
    result: dict[str, Any] = {"command": " ".join(["python -m bench.generalisation", *(argv or sys.argv[1:])]),
                              "rows": args.rows, "folds": args.folds, "seeds": args.seeds,
                              "max_test": args.max_test, "reference_zero_aiq": reference_zero(pool.sets), "schemes": {}}
    for scheme in args.schemes:
        names = [n for n in args.sets if scheme == "kfold" or n in LOSO_TRAIN]
        per: dict[str, list[dict[str, float | None]]] = {n: [] for n in names}
        for seed in range(args.seed, args.seed + args.seeds):
            fold = group_folds([r.text for r in pool.rows], pool.groups, args.folds, seed)
            for f in range(args.folds):
                memories: dict[Any, Any] = {}
                for n in names:
                    got = run_fold(pool, n, scheme, fold, f, args, memories)
                    if got is not None:
                        per[n].append(got)
        result["schemes"][scheme] = {n: {"metric": SETS[n][1], **summarise_folds(v, args.routers), "per_fold": v}
                                     for n, v in per.items()}
    result["wall_s"] = round(time.time() - started, 1)
    print(format_table(result, args.routers))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return result


def format_table(result: dict[str, Any], routers: list[str]) -> str:
    """Markdown tables: per scheme and dataset, each router's mean +- sd over folds."""
    lines = [f"rows scored: {result['rows']} (of the shipped head); folds {result['folds']} x seeds {result['seeds']}; "
             f"max rows per fold {result['max_test'] or 'all'}; wall {result.get('wall_s', '?')} s",
             "zero-router AIQ on the whole RouterBench files: " + ", ".join(
                 f"{k} {v:.4f} (README {REFERENCE_ZERO_AIQ[k]})" for k, v in result["reference_zero_aiq"].items())]
    cols = [*routers] + [c for c in ("mixroute-knn", "mixroute-zero") if c.split("-")[1] in routers and "mixroute" in routers]
    for scheme, sets in result["schemes"].items():
        lines += ["", f"### {scheme}", "", "| dataset | metric | rows | folds | " + " | ".join(cols) + " |",
                  "|---|---|---|---|" + "---|" * len(cols)]
        for name, s in sets.items():
            cells = [_pm(s.get(c)) for c in cols]
            lines.append(f"| {name} | {s['metric'].upper()} | {s['rows']} | {s['folds']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _pm(v: dict[str, float | None] | None) -> str:
    if not v or v.get("mean") is None:
        return "-"
    return f"{v['mean']:.3f}" + (f" ± {v['sd']:.3f}" if v.get("sd") is not None else "")


def _progress(label: str, done: int, total: int) -> None:
    print(f"{label}: {done}/{total}", file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.generalisation", description=__doc__.split("\n")[0])
    p.add_argument("data", nargs="?", type=Path, default=Path("../shared/data"))
    p.add_argument("--scheme", default="kfold,loso", help="comma list of kfold, loso")
    p.add_argument("--sets", default=",".join(SETS), help="comma list of " + ", ".join(SETS))
    p.add_argument("--routers", default=",".join(ROUTERS))
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--seeds", type=int, default=1, help="fold assignments (seed, seed+1, ...)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rows", choices=("unseen", "all"), default="unseen")
    p.add_argument("--max-test", type=int, default=0, help="rows scored per dataset and fold (0: all)")
    p.add_argument("--quick", action="store_true", help="--max-test 60 (unless given), one fold seed")
    p.add_argument("--adapters", type=Path, default=None)
    p.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache" / "mixroute" / "generalisation")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args(argv)
    args.schemes = [s for s in args.scheme.split(",") if s]
    args.sets = [s for s in args.sets.split(",") if s]
    args.routers = [r for r in args.routers.split(",") if r]
    bad = [s for s in args.schemes if s not in ("kfold", "loso")] + [s for s in args.sets if s not in SETS]
    if bad:
        p.error(f"unknown scheme or dataset: {', '.join(bad)}")
    if args.quick:
        args.max_test = args.max_test or 60
        args.seeds = 1
    return args


if __name__ == "__main__":
    main()
