"""The encoder's last layer with per-head LoRA on its output map, pooled per head without
materialising every head's token states.

When the only LoRA deltas of the top layer sit on its last linear map (``output.dense``,
the shipped placement: docs/BENCHMARKS.md "Shared trunk"), head ``s`` differs from the
others only in ``d_s = z_s B_s^T`` with ``z_s = h A_s^T`` (rank ``r``, 16 here). The
layer's output is ``LayerNorm(u + d_s)`` per token (``u`` = frozen output map + attention
residual, shared), and a mean-pooled head needs only its mean over real tokens. LayerNorm's
mean and variance of ``u + d_s`` follow from rank-``r`` quantities::

    mean(u + d)   = mean(u) + z . c_s                      c_s = column means of B_s    (r)
    mean((u+d)^2) = (|u|^2 + 2 z . (B_s^T u) + z^T G_s z) / D       G_s = B_s^T B_s    (r x r)

and the pooled mean is then ``gamma * (sum_t w_t u_t + B_s sum_t w_t z_t - sum_t w_t mu_t)
+ beta`` with ``w_t = mask_t / (n * sigma_t)``: every per-head tensor is ``(S, B, T, r)``
instead of ``(S, B, T, D)`` (D = 384 for MiniLM). Only max-pooled heads (``pii``,
``injection``) materialise their token states. Exact up to rounding; computed in float32.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F

from router.classify.layers import StackedLinear, attention_context, frozen_ffn_input

OUTPUT = "output.dense"


def rank_space_ok(lin: StackedLinear) -> bool:
    """Whether ``lin`` (a stacked top layer) carries LoRA on its output map only."""
    return set(lin.lora) == {OUTPUT}


class RankSpacePooler:
    """The last layer of the encoder, pooled per stacked slot in LoRA rank space.

    Args:
        lin: the layer's stacked maps; :func:`rank_space_ok` must hold. Its ``output.dense``
            LoRA holds ``A (S, r, I)`` and ``B (S, D, r)`` (scaling folded into ``B``).
        n_attn_heads: attention heads of the encoder.
        eps: LayerNorm epsilon.

    The slot matrices are laid side by side once here, so that each call's rank-space work
    is a few plain matrix products over all ``B x T`` tokens: ``A`` as ``(I, S r)``, ``B`` as
    ``(D, S r)``, ``G_s = B_s^T B_s`` as one block-diagonal ``(S r, S r)`` and the column
    means ``c_s`` as a block-diagonal ``(S r, S)``.
    """

    def __init__(self, lin: StackedLinear, n_attn_heads: int, eps: float):
        self.lin, self.n_attn_heads, self.eps = lin, n_attn_heads, eps
        a, b = lin.lora[OUTPUT]
        self.slots, dim, self.r = b.shape
        self.a_cat = a.permute(2, 0, 1).reshape(a.shape[2], -1).contiguous()          # (I, S r)
        bf = b.float()
        self.b_slots = bf                                                               # (S, D, r)
        self.b_cat = bf.permute(1, 0, 2).reshape(dim, -1).contiguous()                   # (D, S r)
        self.gram = torch.block_diag(*(bs.T @ bs for bs in bf))                          # (S r, S r)
        self.means = torch.block_diag(*(bs.mean(0, keepdim=True).T for bs in bf))       # (S r, S)

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None, mask: torch.Tensor, max_slots: list[int],
                 lengths: list[int], qkv: Callable[[torch.Tensor], torch.Tensor] | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Run the layer on ``x`` and pool each slot's output over real tokens.

        Args:
            x: ``(B, T, D)`` hidden states entering the layer (no head axis: nothing below
                it is adapted).
            bias: attention bias (:func:`router.classify.layers.attention_bias`).
            mask: ``(B, T)`` 1 for real tokens.
            max_slots: slots whose max over real tokens is also wanted.
            lengths: real tokens per prompt (for the frozen maps).
            qkv: the fused frozen query/key/value map, as for :func:`bert_layer`.

        Returns:
            ``(mean (S, B, D), max (len(max_slots), B, D) or None)``, float32: what
            :func:`router.classify.layers.mean_pool` / ``max_pool`` of the materialised
            states give (a prompt without real tokens pools to zeros, like ``mean_pool``).
        """
        lw, eps, r = self.lin.lw, self.eps, self.r
        ctx = attention_context(x, bias, self.n_attn_heads, partial(lw.apply, lengths=lengths), qkv)
        a, h = frozen_ffn_input(ctx, x, lw, eps, lengths)
        n_b, n_t, dim = a.shape
        u = lw.apply_add(OUTPUT, h, a, lengths).float().reshape(-1, dim)        # (N, D), N = B T
        z = (h.reshape(-1, h.shape[-1]) @ self.a_cat).float()                   # (N, S r)
        gamma, beta = (t.float() for t in lw.ln_out)

        # LayerNorm statistics of u + z_s B_s^T per token and slot, in rank space.
        mu = u.mean(-1, keepdim=True) + z @ self.means                           # (N, S)
        quad = z * (2 * (u @ self.b_cat) + z @ self.gram)                        # (N, S r)
        ex2 = (u * u).mean(-1, keepdim=True) + quad.view(-1, self.slots, r).sum(-1) / dim
        rstd = torch.rsqrt((ex2 - mu * mu).clamp_min(0.0) + eps)                 # (N, S)

        m = mask.to(torch.float32)
        n = m.sum(-1)                                                            # (B,)
        w = (rstd * (m / n.clamp(min=1.0).unsqueeze(-1)).reshape(-1, 1)).view(n_b, n_t, self.slots)
        wu = torch.bmm(w.transpose(1, 2), u.view(n_b, n_t, dim))                # (B, S, D)
        wz = (w.unsqueeze(-1) * z.view(n_b, n_t, self.slots, r)).sum(1)         # (B, S, r)
        pooled = wu + torch.einsum("bsr,sdr->bsd", wz, self.b_slots) \
            - (w * mu.view(n_b, n_t, self.slots)).sum(1).unsqueeze(-1)
        mean = (gamma * pooled + beta * (n > 0).to(torch.float32).view(-1, 1, 1)).transpose(0, 1)

        top = None
        if max_slots:
            fill = ~mask.to(torch.bool).reshape(-1, 1)
            tops = []
            for s in max_slots:
                states = torch.addmm(u, z[:, s * r:(s + 1) * r], self.b_slots[s].T)
                states = F.layer_norm(states, (dim,), gamma, beta, eps=eps).masked_fill_(fill, float("-inf"))
                tops.append(states.view(n_b, n_t, dim).amax(1))
            top = torch.stack(tops)
        return mean, top
