"""How much the served quality predictions (head + outcome memory) move with the encoder's
numeric path, side by side in one run.

    python -m bench.memory_precision [--data DIR] [--source routerbench] [--splits calib,test]
                                     [--variants float32/onednn,float32/int8,bfloat16/onednn] [--json OUT]

For every variant (``dtype/linear``, as :func:`router.classify.load_predictor` takes them) the
shipped classifier with its outcome memory predicts each model's quality on the rows of
``--source`` in the given classifier splits (rows the memory never holds). Printed per
variant: the mean over models of the ROC AUC of the predicted quality against the recorded
outcome (score > 0.5), and the mean and largest absolute difference from the first variant's
predictions (probabilities). The memory blends each prediction with the recorded scores of
the prompt's 40 nearest training prompts (:mod:`router.classify.memory`), so a precision that
moves the embedding enough to swap a neighbour moves a prediction by about 1/50.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=Path("../shared/data"))
    ap.add_argument("--source", default="routerbench")
    ap.add_argument("--splits", default="calib,test")
    ap.add_argument("--variants", default="float32/onednn,float32/int8,bfloat16/onednn")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)

    from sklearn.metrics import roc_auc_score

    from router.classify import load_predictor
    from router.classify.data import load_rows, split_of

    splits = set(args.splits.split(","))
    rows = [r for r in load_rows(args.data) if r.source == args.source and split_of(r.text) in splits]
    if not rows:
        raise SystemExit(f"no {args.source} rows of splits {sorted(splits)} under {args.data}")
    models = sorted({m for r in rows for m in r.scores})
    outcome = np.array([[np.nan if r.scores.get(m) is None else r.scores[m] for m in models] for r in rows], float)
    texts = [r.text for r in rows]
    predicted: dict[str, np.ndarray] = {}
    for variant in args.variants.split(","):
        dtype, linear = variant.split("/")
        predictor = load_predictor(dtype=dtype, linear=linear, exclude_exact=True)
        out = [o for s in range(0, len(texts), 32) for o in predictor.classify_batch(texts[s:s + 32])]
        predicted[variant] = np.array([[o["quality"].get(m, np.nan) for m in models] for o in out], float)
    first = next(iter(predicted.values()))
    result = {"rows": len(rows), "source": args.source, "splits": sorted(splits), "variants": []}
    for variant, p in predicted.items():
        aucs = []
        for j in range(len(models)):
            ok = ~np.isnan(outcome[:, j]) & ~np.isnan(p[:, j])
            y = outcome[ok, j] > 0.5
            if 0 < y.mean() < 1:
                aucs.append(float(roc_auc_score(y, p[ok, j])))
        diff = np.abs(p - first)
        row = {"variant": variant, "mean_auc": round(float(np.mean(aucs)), 4),
               "mean_abs_diff": round(float(np.nanmean(diff)), 5), "max_abs_diff": round(float(np.nanmax(diff)), 4)}
        result["variants"].append(row)
        print(json.dumps(row))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result


if __name__ == "__main__":
    main()
