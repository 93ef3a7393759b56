"""Where the LoRA sits vs accuracy: train one head with a given placement on a subset.

Usage::

    python -m bench.classifier_placement --layers 5 --modules output.dense      # the shipped placement
    python -m bench.classifier_placement --layers 4,5 --modules output.dense    # two top layers

Trains ``--head`` (default ``quality``) on about ``--limit`` rows of ``--data`` (every k-th
row, :class:`router.classify.train.TrainConfig`), 3 epochs, seed 0, under CPU bfloat16
autocast where the CPU has native bf16, into ``--out`` (default
``/tmp/mixroute-placement-<layers>-<modules>``), and prints the training wall time and the
head's held-out metrics from its model card. Serving cost of the result:
``mixroute bench classifier --heads 1,8 --no-separate --adapters <out>``
(docs/BENCHMARKS.md, "Trade-off: where the LoRA sits").
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    ap.add_argument("--head", default="quality")
    ap.add_argument("--layers", default="5", help="comma-separated encoder layers (0-5)")
    ap.add_argument("--modules", default="output.dense", help="comma-separated linear maps of those layers")
    ap.add_argument("--limit", type=int, default=6000)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--cache-dir", type=Path, default=Path("/tmp/mixroute-placement-cache"))
    a = ap.parse_args(argv)

    from router.classify.precision import cpu_has_bf16
    from router.classify.train import TrainConfig, train

    layers = [int(x) for x in a.layers.split(",")]
    modules = a.modules.split(",")
    out = a.out or Path(f"/tmp/mixroute-placement-{a.layers.replace(',', '_')}-{len(modules)}")
    start = time.time()
    train(TrainConfig(data=a.data, out=out, heads=[a.head], limit=a.limit, layers=layers, modules=modules, seed=0,
                      epochs=a.epochs, cache_dir=a.cache_dir, autocast_bf16=cpu_has_bf16()))
    metrics = json.loads((out / a.head / "config.json").read_text()).get("metrics", {})
    print(json.dumps({"head": a.head, "layers": layers, "modules": modules, "limit": a.limit,
                      "train_wall_s": round(time.time() - start, 1), "out": str(out), "metrics": metrics}))


if __name__ == "__main__":
    main()
