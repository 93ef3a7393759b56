"""Print the held-out metrics of the shipped heads (adapters/*/config.json) as Markdown.

Usage: python bench/classifier_report.py [ADAPTERS_DIR]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "adapters"
configs = {p.parent.name: json.loads(p.read_text()) for p in sorted(root.glob("*/config.json"))}

q = configs.get("quality")
if q:
    m = q["metrics"]
    print(f"### quality (test split, mean AUC {m['mean_auc']})\n")
    print("| model | AUC | test rows | positive rate | Brier | ECE (calibrated) | ECE (raw sigmoid) |")
    print("|---|---|---|---|---|---|---|")
    for label, v in sorted(m["per_label"].items(), key=lambda kv: -kv[1]["n"]):
        print(f"| `{label}` | {v['auc']} | {v['n']} | {v['positive_rate']} | {v['brier']} | {v['ece']} | "
              f"{m.get('ece_uncalibrated', {}).get(label)} |")
    print()
for name, c in configs.items():
    if name == "quality":
        continue
    m = {k: v for k, v in c["metrics"].items() if not isinstance(v, dict)}
    print(f"- **{name}** ({c['kind']}, test rows {c['data']['rows']['test']}): "
          + ", ".join(f"{k} {v}" for k, v in m.items()))
