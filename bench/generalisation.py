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

``--variants 'kappa=3;task_smoothing=0'`` adds a ``mixroute`` column per variant, its fold
memories read with those settings (``k``, ``kappa``, ``task_smoothing``; ``tau``: the
candidate similarity-weighted blend, :func:`bench.generalisation_parts.similarity_blend`),
and its paired difference with the shipped settings: how a setting is chosen by
cross-validation.

``--quick`` scores at most ``--max-test`` rows per dataset and fold (default 60) with one
fold seed. The first run of any mode pays one encoder pass over every prompt of ``DATA``
(cached in ``--cache-dir``); later runs only re-blend and route (docs/BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from bench.generalisation_parts import (FoldPredictor, Fixed, HeadSignals, Recording, Signals, Recorder, duplicate_groups,
                                        fold_memory, group_folds)
from router.classify.data import load_rows, split_of
from router.classify.memory import OutcomeMemory
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
             memories: dict[Any, Any], oof: dict[tuple[str, str], Any]) -> dict[str, Any] | None:
    """The metric of each router on dataset ``name``'s rows in fold ``f`` (``None``: no rows),
    and which rows (``rows``); each router's out-of-fold predictions go into ``oof``."""
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
        router = registry.get(r.split(":")[0])
        if r.startswith("mixroute"):
            router = Recording(Recorder(FoldPredictor(pool.signals, with_settings(memory, args.variants.get(r, {})),
                                                       args.variants.get(r, {}).get("tau", 0.0)),
                                         oof, r, pool.signals.head_model))
        elif r == "knn":
            pred, _ = router.predict(test, Context(train=knn_train, embed=pool.embed, seed=args.seed))
            oof.update(((r, p), row) for p, row in zip(test.prompts, pred))
            router = Fixed(oof, r)
        res = summarise(test, router.run(test, Context(seed=args.seed, options=_options(router))), bootstrap=0)
        out[r] = res.values[SETS[name][1]]
    out["rows"] = test_idx.tolist()
    return out


def _options(router: Any) -> dict[str, Any]:
    return {"predictor": router.predictor} if isinstance(router, Recording) else {}


def pooled(pool: Pool, name: str, per_fold: list[dict[str, Any]], oof: dict[tuple[str, str], Any],
           args: argparse.Namespace) -> dict[str, Any]:
    """Every router once over all the rows its folds scored, each row predicted out of fold
    (``mixroute``: blended with the memory of the fold that held it out): one figure per
    dataset, as a held-out set of that size gives, with its 95% bootstrap interval."""
    data = pool.sets[name]
    idx = sorted({i for p in per_fold for i in p["rows"]})
    if len(idx) < 2:
        return {}
    test = data.subset(np.array(idx))
    out: dict[str, Any] = {"rows": len(idx)}
    metric = SETS[name][1]
    for r in args.routers:
        if r == "knn" and any(p.get("knn") is None for p in per_fold):
            continue
        router = (Recording(Recorder(None, oof, r, pool.signals.head_model)) if r.startswith("mixroute")
                  else Fixed(oof, r) if r == "knn" else registry.get(r))
        res = summarise(test, router.run(test, Context(seed=args.seed, options=_options(router))),
                        bootstrap=args.bootstrap, seed=args.seed)
        out[r] = {"value": _r4(res.values[metric]), "ci": [_r4(x) for x in res.ci.get(metric, [])]}
    return out


def _r4(v: float | None) -> float | None:
    return None if v is None else round(float(v), 4)


def with_settings(memory: OutcomeMemory, settings: dict[str, float]) -> OutcomeMemory:
    """``memory`` read with other ``k``, ``kappa`` or ``task_smoothing`` (a variant's)."""
    if "task_smoothing" in settings:
        memory = memory.with_smoothing(settings["task_smoothing"])
    return replace(memory, **{k: (int(v) if k == "k" else v) for k, v in settings.items() if k in ("k", "kappa")})


def parse_variants(text: str) -> dict[str, dict[str, float]]:
    """``"kappa=3;task_smoothing=0,k=40"`` -> ``{"mixroute:kappa=3": {...}, ...}``: extra
    ``mixroute`` columns whose fold memories are read with these settings."""
    out = {}
    for spec in filter(None, (v.strip() for v in text.split(";"))):
        settings = {}
        for item in spec.split(","):
            key, _, value = item.partition("=")
            if key.strip() not in ("k", "kappa", "task_smoothing", "tau"):
                raise ValueError(f"unknown memory setting {key!r} in --variants (k, kappa, task_smoothing, tau)")
            settings[key.strip()] = float(value)
        out["mixroute:" + spec.replace(" ", "")] = settings
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
    for a, b in _pairs(routers):
        series[f"{a}-{b}"] = [p[a] - p[b] for p in per_fold if p.get(a) is not None and p.get(b) is not None]
    for k, v in series.items():
        a = np.array(v, float)
        out[k] = {"mean": round(float(a.mean()), 4) if a.size else None,
                  "sd": round(float(a.std(ddof=1)), 4) if a.size > 1 else None}
    return out


def _pairs(routers: list[str]) -> list[tuple[str, str]]:
    """The paired differences reported: ``mixroute`` against ``knn`` and ``zero``, and each
    variant against ``mixroute``."""
    pairs = [("mixroute", b) for b in ("knn", "zero") if "mixroute" in routers and b in routers]
    return pairs + [(v, "mixroute") for v in routers if v.startswith("mixroute:") and "mixroute" in routers]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    from router.classify import default_adapters_dir
    from router.classify.memory import MEMORY_FILE

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
        pooled_by: dict[str, dict[str, Any]] = {}
        for seed in range(args.seed, args.seed + args.seeds):
            fold = group_folds([r.text for r in pool.rows], pool.groups, args.folds, seed)
            oof: dict[tuple[str, str], Any] = {}
            this: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
            for f in range(args.folds):
                memories: dict[Any, Any] = {}
                for n in names:
                    got = run_fold(pool, n, scheme, fold, f, args, memories, oof)
                    if got is not None:
                        this[n].append(got)
            for n in names:
                if seed == args.seed:  # the pooled figure: the first fold assignment's
                    pooled_by[n] = pooled(pool, n, this[n], oof, args)
                per[n] += [{k: v for k, v in p.items() if k != "rows"} for p in this[n]]
        result["schemes"][scheme] = {n: {"metric": SETS[n][1], **summarise_folds(v, args.routers),
                                         "pooled": pooled_by[n], "per_fold": v} for n, v in per.items()}
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
    cols = [*routers] + [f"{a}-{b}" for a, b in _pairs(routers)]
    for scheme, sets in result["schemes"].items():
        lines += ["", f"### {scheme}: mean ± sd over folds", "",
                  "| dataset | metric | rows | folds | " + " | ".join(cols) + " |", "|---|---|---|---|" + "---|" * len(cols)]
        for name, s in sets.items():
            cells = [_pm(s.get(c)) for c in cols]
            lines.append(f"| {name} | {s['metric'].upper()} | {s['rows']} | {s['folds']} | " + " | ".join(cells) + " |")
        lines += ["", f"### {scheme}: pooled out-of-fold rows, [95% bootstrap interval]", "",
                  "| dataset | metric | rows | " + " | ".join(routers) + " |", "|---|---|---|" + "---|" * len(routers)]
        for name, s in sets.items():
            pooled_row = s.get("pooled") or {}
            cells = [_ci(pooled_row.get(r)) for r in routers]
            lines.append(f"| {name} | {s['metric'].upper()} | {pooled_row.get('rows', 0)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _pm(v: dict[str, float | None] | None) -> str:
    if not v or v.get("mean") is None:
        return "-"
    return f"{v['mean']:.3f}" + (f" ± {v['sd']:.3f}" if v.get("sd") is not None else "")


def _ci(v: dict[str, Any] | None) -> str:
    if not v or v.get("value") is None:
        return "-"
    ci = v.get("ci") or []
    return f"{v['value']:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if len(ci) == 2 else "")


def _progress(label: str, done: int, total: int) -> None:
    print(f"{label}: {done}/{total}", file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.generalisation", description=__doc__.split("\n")[0])
    p.add_argument("data", nargs="?", type=Path, default=Path("../shared/data"))
    p.add_argument("--scheme", default="kfold,loso", help="comma list of kfold, loso")
    p.add_argument("--sets", default=",".join(SETS), help="comma list of " + ", ".join(SETS))
    p.add_argument("--routers", default=",".join(ROUTERS))
    p.add_argument("--variants", default="", help="extra mixroute columns with other memory settings, "
                   "e.g. 'kappa=3;task_smoothing=0' (k, kappa, task_smoothing, tau)")
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--seeds", type=int, default=1, help="fold assignments (seed, seed+1, ...)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--bootstrap", type=int, default=200, help="resamples of the pooled figures' intervals")
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
    try:
        args.variants = parse_variants(args.variants)
    except ValueError as exc:
        p.error(str(exc))
    args.routers = [r for r in args.routers.split(",") if r] + list(args.variants)
    bad = [s for s in args.schemes if s not in ("kfold", "loso")] + [s for s in args.sets if s not in SETS]
    if bad:
        p.error(f"unknown scheme or dataset: {', '.join(bad)}")
    if args.quick:
        args.max_test = args.max_test or 60
        args.seeds = 1
    return args


if __name__ == "__main__":
    main()
