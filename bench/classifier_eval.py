"""Per-task AUC of the shipped ``quality`` head on the test split (prompts training never saw).

AUC over a mix of tasks partly measures "which task is this" (GSM8K is harder than MMLU for
every model); the per-task rows show how well the head ranks prompts WITHIN a task, which
is what routing inside one workload needs.

Usage: python bench/classifier_eval.py [DATA_DIR] [--json OUT] [--dtype bfloat16]
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

from router.classify import load_encoder
from router.classify.data import load_rows, split_of
from router.classify.metrics import auc
from router.classify.runtime import postprocess

args = [a for a in sys.argv[1:2] if not a.startswith("--")]
data = Path(args[0]) if args else Path(__file__).resolve().parents[2] / "shared" / "data"
rows = [r for r in load_rows(data) if split_of(r.text) == "test"]
enc = load_encoder(heads=["quality"], device="cpu",
                   dtype=sys.argv[sys.argv.index("--dtype") + 1] if "--dtype" in sys.argv else "float32")
head = enc.heads[0]
probs = []
for s in range(0, len(rows), 64):
    probs += postprocess(head.config, enc.run([r.text for r in rows[s:s + 64]])[0]).tolist()
groups: dict[tuple[str, str], tuple[list, list]] = defaultdict(lambda: ([], []))
for r, p in zip(rows, probs):
    task = f"{r.source}/{r.task.split(':')[0]}"
    for m, score in r.scores.items():
        j = head.config.labels.index(m)
        groups[(m, task)][0].append(p[j])
        groups[(m, task)][1].append(int(score >= 0.5))
out = []
for (m, task), (ps, ys) in sorted(groups.items()):
    a = auc(ps, ys)
    out.append({"model": m, "task": task, "n": len(ys), "positive_rate": round(sum(ys) / len(ys), 3),
                "auc": None if a is None else round(a, 4)})
print("| model | task | test rows | positive rate | AUC |\n|---|---|---|---|---|")
for o in out:
    print(f"| `{o['model']}` | {o['task']} | {o['n']} | {o['positive_rate']} | {o['auc']} |")
if "--json" in sys.argv:
    Path(sys.argv[sys.argv.index("--json") + 1]).write_text(json.dumps(out, indent=2) + "\n")
