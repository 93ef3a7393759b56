"""The classifier's frozen linear maps, torch's default (MKL on the CPU) against oneDNN with
prepacked weights (:class:`router.classify.layers.PackedLinear`), interleaved call by call in
one process so that a noisy machine affects both alike.

Usage::

    python -m bench.classifier_linear_ab [--calls 200] [--batches 12] [--threads 2] [--dtype bfloat16]

Prints the median ms per call of the shipped heads (``--dtype``, default float32, CPU) for
one ~100-token prompt (``--calls`` each) and for batches of 32 (``--batches`` each, one
batched pass), and default / oneDNN. The oneDNN side also fuses GELU and the residual adds
into its matmuls (:meth:`router.classify.layers.LayerWeights.apply_gelu`, ``apply_add``).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--batches", type=int, default=12)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    a = ap.parse_args()
    import torch

    from router.classify import load_encoder
    from router.classify.bench import PROMPT
    from router.classify.runtime import MultiHeadEncoder

    torch.set_num_threads(a.threads)
    from router.classify.errors import AdapterError

    shipped = load_encoder(device="cpu", dtype=a.dtype, linear="default")
    default = MultiHeadEncoder(copy.deepcopy(shipped.base), shipped.heads, dtype=a.dtype, linear="default",
                               prompt_threads=0)
    try:
        onednn = MultiHeadEncoder(copy.deepcopy(shipped.base), shipped.heads, dtype=a.dtype, linear="onednn",
                                  prompt_threads=0)
    except AdapterError as err:
        raise SystemExit(f"no oneDNN prepacked linear here: {err}") from None
    print(f"dtype {a.dtype}, {a.threads} threads", flush=True)
    batch = [f"{PROMPT} (variant {i})" for i in range(32)]
    for name, texts, n in (("batch 1", [PROMPT], a.calls), ("batch 32", batch, a.batches)):
        times: dict[str, list[float]] = {"default": [], "onednn": []}
        for enc in (default, onednn):
            enc.run(texts)  # warm-up
        for i in range(n):
            order = (("default", default), ("onednn", onednn)) if i % 2 == 0 else (("onednn", onednn),
                                                                               ("default", default))
            for key, enc in order:
                t = time.perf_counter()
                enc.run(texts)
                times[key].append((time.perf_counter() - t) * 1000)
        d, o = statistics.median(times["default"]), statistics.median(times["onednn"])
        print(f"{name}: default {d:.2f} ms, onednn {o:.2f} ms, default / onednn {d / o:.2f}", flush=True)


if __name__ == "__main__":
    main()
