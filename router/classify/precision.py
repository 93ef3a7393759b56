"""Which precision and which frozen-linear implementation the encoder runs with on this
machine: ``dtype`` (float32 / bfloat16) and ``linear`` (int8 / oneDNN / default), from
the CPU's flags or the GPU, with the measurements behind each choice in the docstrings."""

from __future__ import annotations

import torch

from router.classify.errors import AdapterError
from router.classify.layers import (cpu_flags, cpu_has_vnni, int8_linear_available, onednn_bf16_available,
                                    onednn_linear_available)


def cpu_has_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AMX-BF16 or AVX-512 BF16 in
    ``/proc/cpuinfo``'s flags); without it torch emulates bfloat16 and it is slower than float32."""
    return bool({"amx_bf16", "avx512_bf16"} & cpu_flags())


def cpu_prefers_bf16() -> bool:
    """Whether the encoder runs faster in bfloat16 than in float32/int8 on this CPU: with
    AMX-BF16 only. AVX-512 BF16 alone is not enough: without AMX, oneDNN's bfloat16 linear
    maps are slower than float32's (``python -m bench.classifier_precision --speed``;
    figures in docs/BENCHMARKS.md)."""
    return "amx_bf16" in cpu_flags()


def resolve_dtype(dtype: str, device: str, linear: str = "auto") -> str:
    """``auto`` -> ``bfloat16`` on CUDA with bf16 support and on CPUs with AMX-BF16
    (:func:`cpu_prefers_bf16`), else ``float32``; ``float32``/``bfloat16`` pass through.
    ``linear`` ``int8`` (float32 CPU maps) makes ``auto`` mean ``float32``.

    Raises:
        AdapterError: any other value.
    """
    if dtype in ("float32", "bfloat16"):
        return dtype
    if dtype != "auto":
        raise AdapterError(f"dtype must be auto, float32 or bfloat16, not {dtype!r}")
    if linear == "int8":
        return "float32"  # asking for a float32 CPU map implies float32
    if str(device).startswith("cuda"):
        return "bfloat16" if torch.cuda.is_bf16_supported() else "float32"
    return "bfloat16" if cpu_prefers_bf16() else "float32"


#: Values of ``MultiHeadEncoder(linear=...)``.
LINEAR_CHOICES = ("auto", "int8", "onednn", "default")


def resolve_linear(linear: str, device: str, dtype: str) -> str:
    """How the frozen linear maps run, from ``linear`` (one of :data:`LINEAR_CHOICES`), the
    device and the resolved dtype: ``auto`` -> ``int8`` for float32 on a CPU with an int8
    dot-product instruction (:func:`router.classify.layers.cpu_has_vnni`) where torch has the
    op, else ``onednn`` on the CPU where torch has it (float32 or bfloat16: weights reordered
    once, GELU and residual adds fused into the matmuls; for bfloat16 compare with
    ``python -m bench.classifier_linear_ab --dtype bfloat16``, docs/CLASSIFIER.md; for
    bfloat16 only where oneDNN runs it on this CPU, :func:`router.classify.layers.onednn_bf16_available`),
    else ``default``.

    Raises:
        AdapterError: an unknown value, or ``int8``/``onednn`` asked for where they cannot run
            (not the CPU, ``int8`` not float32, ``onednn`` with bfloat16 on a CPU without
            oneDNN's bfloat16 support, or missing from this torch build).
    """
    if linear not in LINEAR_CHOICES:
        raise AdapterError(f"linear must be one of {', '.join(LINEAR_CHOICES)}, not {linear!r}")
    cpu = not str(device).startswith("cuda")
    cpu32 = cpu and dtype == "float32"
    if linear == "default":
        return "default"
    if linear == "int8":
        if not (cpu32 and int8_linear_available()):
            raise AdapterError("linear=int8 needs dtype float32 on the CPU and a torch build with the quantised "
                               "int8 engine")
        return linear
    onednn = cpu and (onednn_bf16_available() if dtype == "bfloat16" else onednn_linear_available())
    if linear == "onednn":
        if not (cpu and onednn_linear_available()):
            raise AdapterError("linear=onednn needs the CPU and a torch build with oneDNN")
        if not onednn:
            raise AdapterError("linear=onednn with dtype bfloat16 needs a CPU on which oneDNN runs bfloat16 "
                               "(AVX-512 BW/VL/DQ or AVX-NE-CONVERT); use dtype float32 or linear default")
        return linear
    if cpu32 and cpu_has_vnni() and int8_linear_available():
        return "int8"
    return "onednn" if onednn else "default"
