"""How hard each classifier split of RouterBench is for the cheap models, and what a static
per-file routing rule realises on it: the yardstick for issue 4's replay target (quality at
least 95% of always-GPT-4 at no more than 35% of its cost) on held-out rows.

    python -m bench.replay_splits ../shared/data/routerbench [--json OUT]

Rows are split as ``mixroute replay --split`` and ``mixroute calibrate --split`` split them
(:func:`router.classify.data.split_of`, by prompt hash). Per split and file it prints the
rows, GPT-4's mean score, and each model's quality ratio (its summed score over GPT-4's)
and cost ratio (its summed recorded cost over GPT-4's). The static rule is fitted on the
``train`` split only: per file, the cheapest model whose train quality ratio on that file is
at least ``--bar`` (0.90), else the strongest model; every row of a file then goes to that
model. It needs no classifier at all (the file stands for the domain, which the ``domain``
head recovers for nearly every RouterBench prompt), so its realised ratio on each split
shows how much of a router's result on that split is the split's own luck.

No figure here involves a prediction: it is all recorded scores and costs.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from router.classify.data import split_of
from router.eval.data import load_eval_data

SPLITS = ("train", "calib", "test")


def _ratios(scores: np.ndarray, costs: np.ndarray, strong: int) -> tuple[np.ndarray, np.ndarray]:
    """Per model: summed score / the strong model's, summed cost / the strong model's."""
    return scores.sum(0) / scores[:, strong].sum(), costs.sum(0) / costs[:, strong].sum()


def static_rule(files: dict, strong_name: str, bar: float) -> dict[str, str]:
    """File name -> the model the static rule sends it to (fitted on the ``train`` rows)."""
    picks = {}
    for name, (data, split) in files.items():
        rows = split == "train"
        strong = data.models.index(strong_name)
        q, c = _ratios(data.scores[rows], data.costs[rows], strong)
        ok = [j for j in range(len(data.models)) if q[j] >= bar]
        picks[name] = data.models[min(ok, key=lambda j: c[j])] if ok else strong_name
    return picks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", type=Path, help="folder of RouterBench CSV files (../shared/data/routerbench)")
    ap.add_argument("--strong", default="gpt-4-1106-preview", help="the always-strongest model")
    ap.add_argument("--bar", type=float, default=0.90, help="train quality ratio a cheaper model must reach (default 0.90)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    paths = sorted(args.folder.glob("*.csv"))
    if not paths:
        raise SystemExit(f"{args.folder}: no CSV files")
    files = {}
    for path in paths:
        data = load_eval_data(path)
        if args.strong not in data.models:
            raise SystemExit(f"{path}: no model {args.strong!r} (models: {', '.join(data.models)})")
        files[path.stem] = (data, np.array([split_of(p) for p in data.prompts]))

    picks = static_rule(files, args.strong, args.bar)
    out: dict = {"strong": args.strong, "bar": args.bar, "static_rule": picks, "splits": {}}
    for split in SPLITS:
        per_file, total_q, total_qs, total_c, total_cs, n = {}, 0.0, 0.0, 0.0, 0.0, 0
        for name, (data, splits) in files.items():
            rows = splits == split
            if not rows.any():
                per_file[name] = {"rows": 0, "strong_mean": None, "models": {}}
                continue
            s, c = data.scores[rows], data.costs[rows]
            strong, pick = data.models.index(args.strong), data.models.index(picks[name])
            q, cr = _ratios(s, c, strong)
            per_file[name] = {"rows": int(rows.sum()), "strong_mean": float(s[:, strong].mean()),
                              "models": {m: {"quality_ratio": round(float(q[j]), 4), "cost_ratio": round(float(cr[j]), 4)}
                                         for j, m in enumerate(data.models)}}
            total_q += s[:, pick].sum()
            total_qs += s[:, strong].sum()
            total_c += c[:, pick].sum()
            total_cs += c[:, strong].sum()
            n += int(rows.sum())
        out["splits"][split] = {"rows": n, "files": per_file,
                                "static_quality_ratio": round(total_q / total_qs, 4) if total_qs else None,
                                "static_cost_ratio": round(total_c / total_cs, 4) if total_cs else None}

    print(f"static rule (fitted on train, bar {args.bar}): "
          + ", ".join(f"{name} -> {model}" for name, model in picks.items()))
    print("| split | rows | static rule: quality ratio | cost ratio | "
          + " | ".join(f"{name}: {args.strong} mean / its pick's ratio" for name in files) + " |")
    print("|---|---|---|---|" + "---|" * len(files))
    for split, rec in out["splits"].items():
        cells = [f"{f['strong_mean']:.3f} / {f['models'][picks[name]]['quality_ratio']:.3f}" if f["rows"] else "-"
                 for name, f in rec["files"].items()]
        q, c = rec["static_quality_ratio"], rec["static_cost_ratio"]
        print(f"| {split} | {rec['rows']} | {'-' if q is None else f'{q:.3f}'} | {'-' if c is None else f'{c:.3f}'} | "
              + " | ".join(cells) + " |")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
