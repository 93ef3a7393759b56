"""The encoder's arithmetic as plain functions: one BERT layer whose linear maps may carry
LoRA deltas for several heads at once.

Shapes: ``B`` prompts, ``T`` tokens, ``D`` hidden size, ``H`` heads, ``r`` LoRA rank.
A hidden state is ``(B, T, D)`` while it is shared by all heads and becomes
``(H, B, T, D)`` at the first linear map that carries a LoRA delta. Everything before that
point runs once per batch, whatever the number of heads — the point of the design.

The same :func:`bert_layer` runs at training time (its ``linear`` callback calls the
peft-wrapped modules) and at serving time (:class:`StackedLinear`), so the two cannot
drift apart.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import torch
import torch.nn.functional as F

#: The linear maps of a BERT layer, by their Hugging Face module names.
LINEARS = ("attention.self.query", "attention.self.key", "attention.self.value",
           "attention.output.dense", "intermediate.dense", "output.dense")

Linear = Callable[[str, torch.Tensor], torch.Tensor]


def onednn_linear_available() -> bool:
    """Whether torch has oneDNN's prepacked linear (``torch.ops.mkldnn._linear_pointwise``,
    what torch.compile's frozen CPU linears call)."""
    ops = getattr(torch.ops, "mkldnn", None)
    return (torch.backends.mkldnn.is_available() and ops is not None
            and hasattr(ops, "_linear_pointwise") and hasattr(ops, "_reorder_linear_weight"))


def onednn_bf16_available() -> bool:
    """Whether oneDNN can reorder and run bfloat16 linear maps on this CPU
    (``torch.ops.mkldnn._is_mkldnn_bf16_supported``: AVX-512 BW/VL/DQ or AVX-NE-CONVERT).
    Without it ``_reorder_linear_weight`` raises for bfloat16 weights (as on AVX2-only CPUs),
    so bfloat16 encoders there run the default maps."""
    check = getattr(getattr(torch.ops, "mkldnn", None), "_is_mkldnn_bf16_supported", None)
    try:
        return onednn_linear_available() and check is not None and bool(check())
    except RuntimeError:
        return False


@lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """This CPU's feature flags from ``/proc/cpuinfo`` (empty where it cannot be read)."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def cpu_has_vnni() -> bool:
    """Whether this CPU has an int8 dot-product instruction (AVX-512 VNNI or AVX-VNNI)."""
    return bool({"avx512_vnni", "avx_vnni"} & cpu_flags())


def int8_linear_available() -> bool:
    """Whether torch has the dynamic-quantised int8 CPU linear (fbgemm/x86 engine,
    ``torch.ops.quantized.linear_dynamic``). torch 2.13 marks the quantised-tensor API
    deprecated; where a later release drops it this returns ``False`` and ``linear=auto``
    falls back to float32."""
    ops = getattr(torch.ops, "quantized", None)
    engines = set(torch.backends.quantized.supported_engines)
    return bool(engines & {"x86", "fbgemm"}) and ops is not None and hasattr(ops, "linear_dynamic") \
        and hasattr(ops, "linear_prepack") and hasattr(torch, "quantize_per_channel")


class PackedLinear:
    """A frozen ``(weight (out, in), bias (out,))`` float32 CPU linear map with its weight
    reordered once for oneDNN; ``self(x)`` == ``F.linear(x, weight, bias)`` for ``x`` of
    shape ``(..., in)`` up to float rounding (about 1e-6 relative).

    Why: torch's default float32 ``addmm`` (MKL) is slower than oneDNN's prepacked maps
    with GELU and residual adds fused; compare with ``python -m bench.classifier_linear_ab``
    (figures in docs/BENCHMARKS.md).
    """

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor):
        self.source, self.bias = weight, bias  # the plain weight: a reference, no copy
        self.weight = torch.ops.mkldnn._reorder_linear_weight(weight, None)

    def __deepcopy__(self, memo: dict) -> "PackedLinear":
        import copy

        # oneDNN's opaque tensor cannot be copied: pack a copy of the plain weight again.
        return PackedLinear(copy.deepcopy(self.source, memo), copy.deepcopy(self.bias, memo))

    def __call__(self, x: torch.Tensor, lengths: list[int] | None = None) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "none", [], "")

    def gelu(self, x: torch.Tensor) -> torch.Tensor:
        """``F.gelu(self(x))`` (exact erf GELU) in one oneDNN call (a post-op of the matmul)."""
        return torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "gelu", [], "none")

    def add(self, x: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
        """``self(x) + other`` (``other`` shaped like the output) in one oneDNN call."""
        return torch.ops.mkldnn._linear_pointwise.binary(x, other, self.weight, self.bias, "add")


class PlainLinear:
    """``F.linear(x, weight, bias)`` with the frozen-map call signature (``lengths`` unused)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor):
        self.weight, self.bias = weight, bias

    def __call__(self, x: torch.Tensor, lengths: list[int] | None = None) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)


class Int8Linear:
    """A frozen float32 CPU linear map run in int8: weights quantised once, symmetric, one
    scale per output channel; activations quantised at each call (dynamic quantisation, one
    affine uint8 scale per prompt), int32 accumulation, float32 output (fbgemm's
    ``quantized::linear_dynamic``, as ``torch.ao.nn.quantized.dynamic.Linear`` runs it).

    ``self(x, lengths)`` ~= ``F.linear(x, weight, bias)`` for ``x`` of shape ``(..., B, T, in)``:
    each prompt (and each head's copy of it) is quantised on its own real tokens, the first
    ``lengths[b]`` of its ``T`` rows, so a prompt's result does not depend on which other
    prompts share its batch or how much padding they add; padding rows of the output are 0
    (the encoder never reads them: attention masks them as keys and pooling skips them).
    Without ``lengths`` the whole input shares one activation scale.

    Error: about 2-4% relative per map (random weights); on the shipped heads' held-out split
    every metric stayed within 0.3 points of float32 (``python -m bench.classifier_precision``,
    docs/BENCHMARKS.md, "int8 frozen linear maps").

    Args:
        reduce_range: quantise activations to 7 bits, which CPUs without VNNI need to avoid
            overflow in their 16-bit intermediate sums (PyTorch's default dynamic qconfig does
            the same on x86); ``None`` (default): 7 bits exactly when this CPU has no VNNI
            (:func:`cpu_has_vnni`). With 8 bits on an AVX2-only CPU the 16-bit sums overflow and
            outputs drift far from float32's (``tests/classify/test_runtime.py``).
    """

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor, reduce_range: bool | None = None):
        if reduce_range is None:
            reduce_range = not cpu_has_vnni()
        self.source, self.bias, self.reduce_range = weight, bias, bool(reduce_range)
        self.out_features = int(weight.shape[0])
        scale = (weight.abs().amax(1) / 127).clamp(min=1e-12).double()
        with warnings.catch_warnings():  # torch 2.13 marks quantised tensors deprecated
            warnings.simplefilter("ignore")
            q = torch.quantize_per_channel(weight, scale, torch.zeros(self.out_features, dtype=torch.long), 0,
                                           torch.qint8)
            self.packed = torch.ops.quantized.linear_prepack(q, bias)

    def __deepcopy__(self, memo: dict) -> "Int8Linear":
        import copy

        return Int8Linear(copy.deepcopy(self.source, memo), copy.deepcopy(self.bias, memo), self.reduce_range)

    def _mm(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.quantized.linear_dynamic(x, self.packed, self.reduce_range)

    def __call__(self, x: torch.Tensor, lengths: list[int] | None = None) -> torch.Tensor:
        shape = x.shape
        if lengths is None or x.dim() < 3 or (len(lengths) == 1 and x.dim() == 3 and lengths[0] == shape[-2]):
            return self._mm(x.reshape(-1, shape[-1])).reshape(*shape[:-1], self.out_features)
        t, b = shape[-2], len(lengths)
        rows = x.reshape(-1, t, shape[-1])
        out = x.new_empty(rows.shape[0], t, self.out_features)
        for i, row in enumerate(rows):
            n = lengths[i % b]
            out[i, n:] = 0.0
            if n:
                out[i, :n] = self._mm(row[:n])
        return out.reshape(*shape[:-1], self.out_features)


@dataclass
class LayerWeights:
    """Frozen weights of one BERT layer (``w[name] = (weight, bias)``, layer norms;
    ``packed[name]``: the same maps prepacked for oneDNN, when :meth:`prepack` ran)."""

    w: dict[str, tuple[torch.Tensor, torch.Tensor]]
    ln_attn: tuple[torch.Tensor, torch.Tensor]
    ln_out: tuple[torch.Tensor, torch.Tensor]
    packed: dict[str, "PackedLinear | Int8Linear"] = field(default_factory=dict, repr=False)

    def apply(self, name: str, x: torch.Tensor, lengths: list[int] | None = None) -> torch.Tensor:
        """The frozen map ``name`` applied to ``x`` (prepacked or int8 when set up;
        ``lengths``: real tokens per prompt, see :class:`Int8Linear`)."""
        p = self.packed.get(name)
        return p(x, lengths) if p is not None else F.linear(x, *self.w[name])

    def apply_gelu(self, name: str, x: torch.Tensor, lengths: list[int] | None = None) -> torch.Tensor:
        """``F.gelu(self.apply(name, x))``, fused into the matmul where the map is prepacked
        for oneDNN (:meth:`PackedLinear.gelu`)."""
        p = self.packed.get(name)
        return p.gelu(x) if isinstance(p, PackedLinear) else F.gelu(self.apply(name, x, lengths))

    def apply_add(self, name: str, x: torch.Tensor, other: torch.Tensor,
                  lengths: list[int] | None = None) -> torch.Tensor:
        """``self.apply(name, x) + other`` (a residual), fused into the matmul where the map
        is prepacked for oneDNN (:meth:`PackedLinear.add`)."""
        p = self.packed.get(name)
        return p.add(x, other) if isinstance(p, PackedLinear) else self.apply(name, x, lengths) + other

    def prepack(self, kind: str = "onednn", reduce_range: bool = False) -> None:
        """Set up every map as ``onednn`` (:class:`PackedLinear`: float32 or bfloat16 CPU
        weights) or ``int8`` (:class:`Int8Linear`: float32 CPU weights)."""
        make = PackedLinear if kind == "onednn" else (lambda w, b: Int8Linear(w, b, reduce_range))
        self.packed = {n: make(w, b) for n, (w, b) in self.w.items()}

    def qkv(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Query, key and value maps as one ``(3D, D)`` weight and ``(3D,)`` bias: one matmul
        instead of three where none of them carries a LoRA delta (same result)."""
        maps = [self.w[n] for n in LINEARS[:3]]
        return torch.cat([w for w, _ in maps]), torch.cat([b for _, b in maps])

    @classmethod
    def from_state(cls, state: dict[str, torch.Tensor], prefix: str) -> "LayerWeights":
        w = {n: (state[f"{prefix}{n}.weight"], state[f"{prefix}{n}.bias"]) for n in LINEARS}
        ln_a = (state[f"{prefix}attention.output.LayerNorm.weight"], state[f"{prefix}attention.output.LayerNorm.bias"])
        ln_o = (state[f"{prefix}output.LayerNorm.weight"], state[f"{prefix}output.LayerNorm.bias"])
        return cls(w, ln_a, ln_o)


def attention_bias(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor | None:
    """Additive attention bias ``(B, 1, 1, T)`` from a 0/1 token mask ``(B, T)``; ``None``
    when no token is padding (e.g. batch 1), which lets attention skip the mask."""
    if bool(mask.all()):
        return None
    return (1.0 - mask[:, None, None, :].to(dtype)) * torch.finfo(dtype).min


def bert_layer(x: torch.Tensor, bias: torch.Tensor | None, lw: LayerWeights, n_attn_heads: int, linear: Linear,
               eps: float = 1e-12, qkv: Callable[[torch.Tensor], torch.Tensor] | None = None,
               lengths: list[int] | None = None, frozen: bool = False) -> torch.Tensor:
    """One post-LayerNorm BERT layer (as in ``transformers.BertLayer``, eval mode).

    Args:
        x: ``(B, T, D)`` or ``(H, B, T, D)``.
        bias: from :func:`attention_bias`.
        lw: the frozen weights (layer norms come from here).
        n_attn_heads: attention heads of the encoder (12 for MiniLM-L6).
        linear: ``linear(name, x)`` applies the named linear map (with any LoRA delta).
        qkv: the fused frozen query/key/value map (``x -> x Wqkv^T + b``, from
            :meth:`LayerWeights.qkv`), used instead of three ``linear`` calls; only valid
            when none of the three carries a LoRA delta.
        lengths: real tokens per prompt, for ``frozen``.
        frozen: no map of the layer carries a LoRA delta (``linear`` is ``lw.apply``): the
            residual adds and the GELU then run inside the matmuls where the maps are
            prepacked for oneDNN (:meth:`LayerWeights.apply_add`, ``apply_gelu``).

    Returns:
        ``(B, T, D)`` if no linear map added a head axis, else ``(H, B, T, D)``.
    """
    ctx = attention_context(x, bias, n_attn_heads, linear, qkv)
    if frozen:
        a, h = frozen_ffn_input(ctx, x, lw, eps, lengths)
        return F.layer_norm(lw.apply_add("output.dense", h, a, lengths), a.shape[-1:], *lw.ln_out, eps=eps)
    a = linear("attention.output.dense", ctx)
    a = F.layer_norm(a + x, a.shape[-1:], *lw.ln_attn, eps=eps)
    h = F.gelu(linear("intermediate.dense", a))
    o = linear("output.dense", h)
    return F.layer_norm(o + a, o.shape[-1:], *lw.ln_out, eps=eps)


def attention_context(x: torch.Tensor, bias: torch.Tensor | None, n_attn_heads: int, linear: Linear,
                      qkv: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
    """A BERT layer's self-attention output before its output map: ``(..., B, T, D)``
    (arguments as for :func:`bert_layer`)."""
    def split(t: torch.Tensor) -> torch.Tensor:
        return t.unflatten(-1, (n_attn_heads, -1)).transpose(-2, -3)

    if qkv is not None:
        q, k, v = (split(t) for t in qkv(x).chunk(3, dim=-1))
    else:
        q = split(linear("attention.self.query", x))
        k = split(linear("attention.self.key", x))
        v = split(linear("attention.self.value", x))
    q, k, v = torch.broadcast_tensors(q, k, v)
    ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    return ctx.transpose(-2, -3).flatten(-2)


def frozen_ffn_input(ctx: torch.Tensor, x: torch.Tensor, lw: LayerWeights, eps: float,
                     lengths: list[int] | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Of a layer without LoRA, from its attention context ``ctx`` and input ``x``: the
    attention block's output ``a`` (the FFN's residual) and the FFN's hidden activations
    ``h = GELU(a W_in^T + b)``, with the residual add and the GELU fused into the oneDNN
    matmuls where the maps are prepacked."""
    a = F.layer_norm(lw.apply_add("attention.output.dense", ctx, x, lengths), x.shape[-1:], *lw.ln_attn, eps=eps)
    return a, lw.apply_gelu("intermediate.dense", a, lengths)


class StackedLinear:
    """Serving-time linear maps of one layer with the LoRA deltas of ``H`` heads stacked.

    For a map with LoRA, ``y[h] = x W^T + b + (x A_h^T) B_h^T`` where ``B_h`` already holds
    the LoRA scaling ``alpha / r``; heads without a delta on that map have zero ``A_h, B_h``.
    Heads with different ranks are zero-padded to the largest, which is exact.

    Args:
        lw: the layer's frozen weights.
        lora: map name -> ``(A (H, r, in), B (H, out, r))``.
    """

    def __init__(self, lw: LayerWeights, lora: dict[str, tuple[torch.Tensor, torch.Tensor]]):
        self.lw = lw
        self.lora = lora

    def __call__(self, name: str, x: torch.Tensor, lengths: list[int] | None = None) -> torch.Tensor:
        y = self.lw.apply(name, x, lengths)
        if name not in self.lora:
            return y
        a, b = self.lora[name]
        if x.dim() == 3:
            z = torch.einsum("bti,hri->hbtr", x, a)
            y = y.unsqueeze(0)
        else:
            z = torch.einsum("hbti,hri->hbtr", x, a)
        return y + torch.einsum("hbtr,hor->hbto", z, b)


def mean_pool(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over real tokens: ``(..., B, T, D)``, mask ``(B, T)`` -> ``(..., B, D)``."""
    m = mask.to(x.dtype).unsqueeze(-1)
    return (x * m).sum(-2) / m.sum(-2).clamp(min=1.0)


def max_pool(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Max over real tokens: ``(..., B, T, D)``, mask ``(B, T)`` -> ``(..., B, D)``."""
    return x.masked_fill(~mask.to(torch.bool).unsqueeze(-1), float("-inf")).amax(-2)


#: Pooling of the top layer's token states, by a head's ``pooling`` setting.
POOLING = {"mean": mean_pool, "max": max_pool}
