"""Latency/throughput benchmark of the multi-head runtime (``mixroute bench classifier``).

For N heads: p50/p99 of one ~100-token prompt at batch 1, and prompts/s at batch 32.
``shared_trunk`` runs the shipped heads (cycled to N; cost does not depend on the weights)
on one trunk pass; ``separate_full_lora`` runs N independent encoders whose single head has
LoRA in every layer (query, value) — what N per-task adapters cost without sharing.
"""

from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from router.classify.heads import Head, LoraPlacement
from router.classify.runtime import MultiHeadEncoder

#: A fixed English prompt of about 100 WordPiece tokens.
PROMPT = ("A store sells pencils in packs of 12 and erasers in packs of 5. Maria needs exactly 60 pencils and "
          "enough erasers so that every 4 pencils come with one eraser. Each pack of pencils costs $3.50 and each "
          "pack of erasers costs $2.25. How much does Maria spend in total, and how many erasers are left over "
          "after she hands them out? Explain your reasoning step by step before giving the final answer.")


def _full_lora_head(base_head: Head, n_layers: int, r: int = 16) -> Head:
    g = torch.Generator().manual_seed(0)
    cfg = base_head.config.model_copy(update={"lora": LoraPlacement(
        layers=list(range(n_layers)), modules=["attention.self.query", "attention.self.value"], r=r, alpha=2 * r)})
    head = Head(cfg, out_weight=base_head.out_weight, out_bias=base_head.out_bias)
    for layer in range(n_layers):
        for m in cfg.lora.modules:
            head.lora[(layer, m)] = (torch.randn(r, 384, generator=g) * 0.01, torch.randn(384, r, generator=g) * 0.01)
    return head


def _measure(run: Callable[[list[str]], object], iters: int, batches: int, batch: int) -> tuple[float, float, float]:
    run([PROMPT])
    lat = []
    for _ in range(iters):
        t = time.perf_counter()
        run([PROMPT])
        lat.append((time.perf_counter() - t) * 1000)
    lat.sort()
    texts = [f"{PROMPT} (variant {i})" for i in range(batch)]
    run(texts)
    t = time.perf_counter()
    for _ in range(batches):
        run(texts)
    tput = batches * batch / (time.perf_counter() - t)
    p99 = lat[min(len(lat) - 1, int(round(0.99 * (len(lat) - 1))))]
    return round(statistics.median(lat), 2), round(p99, 2), round(tput, 1)


def run_bench(counts: list[int], *, iters: int = 100, batches: int = 5, batch: int = 32, threads: int = 2,
              separate: bool = True, adapters: Path | None = None, dtype: str = "auto",
              linears: tuple[str, ...] = ("auto",), device: str = "cpu", base_path: Path | None = None,
              prompt_threads: tuple[int | None, ...] = (None,),
              log: Callable[[dict], None] | None = None) -> list[dict]:
    """Rows ``{"heads", "p50_ms", "p99_ms", "throughput_per_s", "variant", "dtype", "linear"}``
    (ms, prompts/s; ``dtype`` is the resolved precision, see
    :func:`router.classify.precision.resolve_dtype`; ``linear`` the resolved frozen-linear
    implementation, ``int8``, ``onednn`` or ``default``, see
    :func:`router.classify.precision.resolve_linear`; the separate full-LoRA rows use the first
    of ``linears``). With several
    ``linears`` (``auto``, ``default``) each head count is measured once per choice, one
    after the other, so they are compared side by side. ``device``: ``cpu`` or ``cuda``
    (each call's outputs are copied to the CPU, which waits for the GPU); ``base_path``: a
    local encoder folder instead of the bundled MiniLM; ``prompt_threads``: the encoder's
    ``prompt_threads`` (:class:`router.classify.runtime.MultiHeadEncoder`; ``None`` = its
    default), each measured side by side like ``linears``; the resolved value is the row's
    ``prompt_threads``."""
    from router.classify import load_encoder

    torch.set_num_threads(threads)
    shipped = load_encoder(adapters, device=device, dtype=dtype, base_path=base_path, linear=linears[0])
    base, heads = shipped.base, shipped.heads
    rows = []

    def emit(row: dict) -> None:
        rows.append(row)
        if log:
            log(row)

    for n in counts:
        chosen = [copy.copy(heads[i % len(heads)]) for i in range(n)]
        for linear in linears:
            for parallel in prompt_threads:
                enc = MultiHeadEncoder(base, chosen, device=device, dtype=dtype, linear=linear,
                                       prompt_threads=parallel)
                p50, p99, tput = _measure(enc.run, iters, batches, batch)
                enc.close()
                emit({"heads": n, "p50_ms": p50, "p99_ms": p99, "throughput_per_s": tput, "variant": "shared_trunk",
                      "dtype": str(enc.dtype).removeprefix("torch."), "linear": enc.linear,
                      "prompt_threads": enc.prompt_threads})
    if separate:
        full = [MultiHeadEncoder(base, [_full_lora_head(heads[i % len(heads)], len(base.layers))], device=device,
                                 dtype=dtype, linear=linears[0], prompt_threads=prompt_threads[0])
                for i in range(max(counts))]
        for n in counts:
            def run_all(texts: list[str], n: int = n) -> None:
                for enc in full[:n]:
                    enc.run(texts)
            p50, p99, tput = _measure(run_all, max(10, iters // n), max(1, batches // 2), batch)
            emit({"heads": n, "p50_ms": p50, "p99_ms": p99, "throughput_per_s": tput, "variant": "separate_full_lora",
                  "dtype": str(full[0].dtype).removeprefix("torch."), "linear": full[0].linear,
                  "prompt_threads": full[0].prompt_threads})
        for enc in full:
            enc.close()
    return rows


