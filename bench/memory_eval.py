"""Held-out quality AUC of the ``quality`` head alone vs blended with the shipped outcome
memory (router/classify/memory.py), on the classifier's ``test`` split of ../shared/data
(prompts neither the head nor the memory saw). Two views:

- per-model AUC, as ``mixroute train`` computes it (labels with >= 10 test rows; score >=
  0.5 counts as a good answer), mean over labels: does the estimate rank *prompts* for
  one model (absolute correctness)?
- within-prompt pairwise accuracy: over every prompt and every pair of its models whose
  recorded scores differ, the share the estimate orders the same way (ties count half):
  does it rank *models* on one prompt, which is what a routing decision uses.

    python -m bench.memory_eval ../shared/data [--split test] [--dims 64,128,384] [--k 40,100,150]
        [--smoothing 0,0.5,1] [--json OUT]

``--dims`` also rebuilds the memory from the data's train split at each number of principal
components (as ``mixroute train --heads memory --memory-dims D`` would, int8 round trip
included; 384 = no projection) and reports each one's AUC next to the shipped file's.
``--k`` reads the shipped memory with other numbers of neighbours, ``--smoothing`` with other
``task_smoothing`` weights (:meth:`OutcomeMemory.with_smoothing`). A third view, the Brier
score (mean squared error of the estimate against every recorded score; lower is better),
says how close the estimate's *level* is, which is what a route-level bar sums.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", type=Path)
    ap.add_argument("--split", default="test", choices=["test", "calib"])
    ap.add_argument("--source", default=None, help="only rows of this source (routellm, routerbench, routerdc)")
    ap.add_argument("--dims", default="", help="comma-separated principal components to rebuild the memory with")
    ap.add_argument("--k", default="", help="comma-separated neighbour counts to read the shipped memory with")
    ap.add_argument("--smoothing", default="", help="comma-separated task_smoothing weights in [0, 1] to read the "
                    "shipped memory with")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    try:
        weights = [float(x) for x in args.smoothing.split(",") if x.strip()]
        if any(not 0.0 <= w <= 1.0 for w in weights):
            raise ValueError
    except ValueError:
        ap.error(f"--smoothing {args.smoothing!r}: weights in [0, 1], comma-separated (e.g. 0,0.5)")

    from router.classify import default_adapters_dir, load_predictor
    from router.classify.data import load_rows, split_of
    from router.classify.memory import MEMORY_FILE, OutcomeMemory, build_from_data, score_matrix
    from router.classify.metrics import auc

    path = default_adapters_dir() / "quality" / MEMORY_FILE
    if not path.is_file():
        raise SystemExit("no shipped outcome memory: mixroute train --heads memory")
    memory = OutcomeMemory.load(path)
    # The head alone, with the embeddings from the same pass; every blend below starts from them.
    pred = load_predictor(heads=["quality"], scan_chars=0, memory=False, embed=True)
    pred.close()
    labels = memory.labels
    rows = [r for r in load_rows(args.data) if split_of(r.text) == args.split
            and (args.source is None or r.source == args.source)]
    y = score_matrix(rows, labels, dtype=float)
    keep = ~np.isnan(y).all(axis=1)
    rows, y = [r for r, k in zip(rows, keep) if k], y[keep]
    texts = sorted(range(len(rows)), key=lambda i: len(rows[i].text))
    head = np.zeros_like(y)
    emb = np.zeros((len(rows), 384), np.float32)
    for s in range(0, len(texts), 64):
        idx = texts[s:s + 64]
        out, e = pred.classify_batch_embed([rows[i].text for i in idx])
        head[idx] = [[o["quality"][lab] for lab in labels] for o in out]
        emb[idx] = e.numpy()
    variants = [("head", head), ("head+memory", memory.blend(head, emb))]
    for k in [int(x) for x in args.k.split(",") if x.strip()]:
        variants.append((f"head+memory k={k}", replace(memory, k=k).blend(head, emb)))
    for w in weights:
        variants.append((f"head+memory smoothing={w:g}", memory.with_smoothing(w, path).blend(head, emb)))
    for d in [int(x) for x in args.dims.split(",") if x.strip()]:
        rebuilt = build_from_data(args.data, default_adapters_dir(), dims=0 if d >= emb.shape[1] else d)
        with tempfile.TemporaryDirectory() as tmp:
            rebuilt.save(Path(tmp) / "m.safetensors")
            rebuilt = OutcomeMemory.load(Path(tmp) / "m.safetensors")
        variants.append((f"head+memory@{d}", rebuilt.blend(head, emb)))
    report = {"split": args.split, "rows": len(rows), "memory_rows": memory.n, "k": memory.k, "kappa": memory.kappa,
              "task_smoothing": memory.smoothing, "per_label": {}}
    for name, q in variants:
        aucs = {}
        for j, lab in enumerate(labels):
            m = ~np.isnan(y[:, j])
            if m.sum() >= 10:
                aucs[lab] = auc(q[m, j].tolist(), (y[m, j] >= 0.5).astype(int).tolist())
        vals = [v for v in aucs.values() if v is not None]
        report[name] = round(float(np.mean(vals)), 4)
        for lab, v in aucs.items():
            report["per_label"].setdefault(lab, {"n": int((~np.isnan(y[:, labels.index(lab)])).sum())})[name] = (
                None if v is None else round(v, 4))
    for name, q in variants:
        report.setdefault("pairwise", {})[name] = round(pairwise(q, y), 4)
        report.setdefault("brier", {})[name] = round(float(np.nanmean((q - y) ** 2)), 5)
    names = [n for n, _ in variants]
    print(f"{args.split} split{'' if args.source is None else ', ' + args.source}, {len(rows)} rows; memory {memory.n} rows, k={memory.k}, kappa={memory.kappa:g}, "
          f"task_smoothing={memory.smoothing:g}")
    print("| model | n | " + " | ".join(names) + " |")
    print("|---|---:|" + "---:|" * len(names))
    print("| **within-prompt pairwise accuracy** | | " + " | ".join(f"**{report['pairwise'][n]}**" for n in names) + " |")
    print("| **mean AUC** | | " + " | ".join(f"**{report[n]}**" for n in names) + " |")
    print("| **Brier score** (lower is better) | | " + " | ".join(f"**{report['brier'][n]}**" for n in names) + " |")
    for lab, v in report["per_label"].items():
        print(f"| {lab} | {v['n']} | " + " | ".join(str(v.get(n)) for n in names) + " |")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


def pairwise(q: np.ndarray, y: np.ndarray) -> float:
    """Share of (prompt, model pair) with different recorded scores that ``q`` orders the
    same way; ties in ``q`` count half."""
    agree = total = 0.0
    for qi, yi in zip(q, y):
        known = ~np.isnan(yi)
        qk, yk = qi[known], yi[known]
        dy = np.sign(yk[:, None] - yk[None, :])
        dq = np.sign(qk[:, None] - qk[None, :])
        mask = dy > 0
        total += mask.sum()
        agree += (dq[mask] > 0).sum() + 0.5 * (dq[mask] == 0).sum()
    return agree / total if total else float("nan")


if __name__ == "__main__":
    main()
