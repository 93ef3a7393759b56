"""The trainable form of one head: the peft-wrapped top layer(s) of the base encoder plus
the head's output layer (:class:`Trainable`), and the Platt scaling fitted on its
calibration split (:func:`platt`). :mod:`router.classify.train` drives them; the serving
runtime (:mod:`router.classify.runtime`) runs the saved weights without peft.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from router.classify import default_base_path
from router.classify.layers import POOLING, attention_bias, bert_layer
from router.classify.runtime import BaseEncoder

if TYPE_CHECKING:
    from router.classify.train import TrainConfig


class Trainable(torch.nn.Module):
    """peft-wrapped top layer(s) of the base plus the head's output layer."""

    def __init__(self, cfg: TrainConfig, base: BaseEncoder, n_out: int, pooling: str = "mean"):
        super().__init__()
        self.pool = POOLING[pooling]
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModel

        layers = "|".join(str(i) for i in cfg.layers)
        modules = "|".join(m.replace(".", r"\.") for m in cfg.modules)
        self.lora_config = LoraConfig(r=cfg.r, lora_alpha=cfg.alpha, lora_dropout=0.05, bias="none",
                                      target_modules=rf".*encoder\.layer\.({layers})\.({modules})")
        hf = AutoModel.from_pretrained(cfg.base_path or default_base_path(), local_files_only=True)
        self.peft = get_peft_model(hf, self.lora_config)
        self.base = base
        self.split = min(cfg.layers)
        self.lora_modules = list(cfg.modules)
        self.out = torch.nn.Linear(base.hidden, n_out)
        self.drop = torch.nn.Dropout(0.1)

    @property
    def ffn_out_only(self) -> bool:
        return self.split == len(self.base.layers) - 1 and self.lora_modules == ["output.dense"]

    @torch.no_grad()
    def prefix(self, x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Frozen part of the top layer, shared by heads whose only LoRA is on its FFN output
        map: ``(residual r = attention output + base FFN output, GELU activations h)``, so a
        head only adds ``LayerNorm(r + lora(h))``; ``None`` for other placements."""
        if not self.ffn_out_only:
            return None
        lw = self.base.layers[self.split]
        captured = {}

        def linear(n: str, t: torch.Tensor) -> torch.Tensor:
            y = F.linear(t, *lw.w[n])
            if n == "intermediate.dense":
                captured["a"] = t
            elif n == "output.dense":
                captured["h"], captured["o"] = t, y
            return y

        bert_layer(x, attention_bias(mask, x.dtype), lw, self.base.n_attn_heads, linear, self.base.eps)
        return captured["a"] + captured["o"], captured["h"]

    def forward(self, x: torch.Tensor, mask: torch.Tensor,
                pre: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        layers = self.peft.base_model.model.encoder.layer
        if pre is not None:
            r, h = pre
            lw = self.base.layers[self.split]
            dense, k = layers[self.split].output.dense, "default"  # a peft LoRA Linear
            delta = dense.lora_B[k](dense.lora_A[k](dense.lora_dropout[k](h))) * dense.scaling[k]
            x = F.layer_norm(r + delta, r.shape[-1:], *lw.ln_out, eps=self.base.eps)
            return self.out(self.drop(self.pool(x, mask)))
        bias = attention_bias(mask, x.dtype)
        for i in range(self.split, len(self.base.layers)):
            mod = layers[i]
            x = bert_layer(x, bias, self.base.layers[i], self.base.n_attn_heads,
                           lambda n, t, mod=mod: mod.get_submodule(n)(t), self.base.eps)
        return self.out(self.drop(self.pool(x, mask)))


def platt(logits: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """Platt scaling ``sigmoid(a * logit + b)`` fitted by LBFGS on (soft) labels ``y``."""
    if logits.numel() < 30:
        return 1.0, 0.0
    a = torch.ones(1, requires_grad=True)
    b = torch.zeros(1, requires_grad=True)
    opt = torch.optim.LBFGS([a, b], lr=0.5, max_iter=100)

    def closure():
        opt.zero_grad()
        loss = F.binary_cross_entropy_with_logits(a * logits + b, y)
        loss.backward()
        return loss

    opt.step(closure)
    return float(a.detach()), float(b.detach())
