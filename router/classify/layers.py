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

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

#: The linear maps of a BERT layer, by their Hugging Face module names.
LINEARS = ("attention.self.query", "attention.self.key", "attention.self.value",
           "attention.output.dense", "intermediate.dense", "output.dense")

Linear = Callable[[str, torch.Tensor], torch.Tensor]


@dataclass
class LayerWeights:
    """Frozen weights of one BERT layer (``w[name] = (weight, bias)``, layer norms)."""

    w: dict[str, tuple[torch.Tensor, torch.Tensor]]
    ln_attn: tuple[torch.Tensor, torch.Tensor]
    ln_out: tuple[torch.Tensor, torch.Tensor]

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
               eps: float = 1e-12, qkv: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """One post-LayerNorm BERT layer (as in ``transformers.BertLayer``, eval mode).

    Args:
        x: ``(B, T, D)`` or ``(H, B, T, D)``.
        bias: from :func:`attention_bias`.
        lw: the frozen weights (layer norms come from here).
        n_attn_heads: attention heads of the encoder (12 for MiniLM-L6).
        linear: ``linear(name, x)`` applies the named linear map (with any LoRA delta).
        qkv: the fused frozen query/key/value map (:meth:`LayerWeights.qkv`), used instead of
            three ``linear`` calls; only valid when none of the three carries a LoRA delta.

    Returns:
        ``(B, T, D)`` if no linear map added a head axis, else ``(H, B, T, D)``.
    """
    def split(t: torch.Tensor) -> torch.Tensor:
        return t.unflatten(-1, (n_attn_heads, -1)).transpose(-2, -3)

    if qkv is not None:
        q, k, v = (split(t) for t in F.linear(x, *qkv).chunk(3, dim=-1))
    else:
        q = split(linear("attention.self.query", x))
        k = split(linear("attention.self.key", x))
        v = split(linear("attention.self.value", x))
    q, k, v = torch.broadcast_tensors(q, k, v)
    ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    ctx = ctx.transpose(-2, -3).flatten(-2)
    a = linear("attention.output.dense", ctx)
    a = F.layer_norm(a + x, a.shape[-1:], *lw.ln_attn, eps=eps)
    h = F.gelu(linear("intermediate.dense", a))
    o = linear("output.dense", h)
    return F.layer_norm(o + a, o.shape[-1:], *lw.ln_out, eps=eps)


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

    def __call__(self, name: str, x: torch.Tensor) -> torch.Tensor:
        y = F.linear(x, *self.lw.w[name])
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
