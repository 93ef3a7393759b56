"""What each head learns: its labels, training targets from :class:`~router.classify.data.Row`,
loss, and held-out metrics. One :class:`HeadSpec` per head, registered in :data:`SPECS`.

Targets are ``(N, n_out)`` float tensors with ``nan`` where a row says nothing (a model not
evaluated on that prompt, a source without a domain), and the losses are masked to match.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from router.classify import metrics
from router.classify.data import DOMAINS, Row


@dataclass(frozen=True)
class HeadSpec:
    """A head's definition (see :class:`router.classify.heads.HeadConfig` for ``kind``)."""

    name: str
    kind: str
    description: str
    pooling: str = "mean"

    def labels(self, rows: list[Row]) -> list[str]:
        if self.name == "quality":
            return sorted({m for r in rows for m in r.scores})
        if self.name == "domain":
            return list(DOMAINS)
        return [self.name]

    def targets(self, rows: list[Row], labels: list[str]) -> torch.Tensor:
        nan = math.nan
        if self.name == "quality":
            return torch.tensor([[r.scores.get(m, nan) for m in labels] for r in rows])
        if self.name == "domain":
            return torch.tensor([[labels.index(r.domain) if r.domain in labels else nan] for r in rows])
        if self.name == "difficulty":
            return torch.tensor([[1.0 - sum(r.scores.values()) / len(r.scores) if r.scores else nan] for r in rows])
        if self.name == "output_length":
            return torch.tensor([[sum(math.log1p(t) for t in r.response_tokens) / len(r.response_tokens)
                                  if r.response_tokens else nan] for r in rows])
        if self.name in ("pii", "injection"):
            return torch.tensor([[r.flags.get(self.name, nan)] for r in rows])
        raise KeyError(self.name)

    def loss(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        mask = ~torch.isnan(y)
        if not mask.any():
            return logits.sum() * 0.0
        if self.kind == "multiclass":
            keep = mask[:, 0]
            return F.cross_entropy(logits[keep], y[keep, 0].long())
        if self.kind == "log_regression":
            return F.smooth_l1_loss(logits[mask], y[mask])
        return F.binary_cross_entropy_with_logits(logits[mask], y[mask])

    def evaluate(self, out: torch.Tensor, y: torch.Tensor, labels: list[str], baseline: torch.Tensor) -> dict:
        """Held-out metrics; ``out`` is post-processed (probabilities / tokens), ``baseline``
        is the train-split mean target (the prompt-independent predictor)."""
        mask = ~torch.isnan(y)
        if self.kind == "multilabel":
            per = {}
            for j, lab in enumerate(labels):
                m = mask[:, j]
                if m.sum() < 10:
                    continue
                truth = (y[m, j] >= 0.5).int().tolist()
                probs = out[m, j].tolist()
                per[lab] = {"auc": _r(metrics.auc(probs, truth)), "n": int(m.sum()),
                            "positive_rate": _r(sum(truth) / len(truth)), "brier": _r(metrics.brier(probs, truth)),
                            "ece": _r(metrics.ece(probs, truth))}
            aucs = [v["auc"] for v in per.values() if v["auc"] is not None]
            return {"per_label": per, "mean_auc": _r(sum(aucs) / len(aucs)) if aucs else None}
        keep = mask[:, 0]
        if self.kind == "multiclass":
            truth = y[keep, 0].long().tolist()
            pred = out[keep].argmax(-1).tolist()
            major = max(set(truth), key=truth.count) if truth else 0
            return {"macro_f1": _r(metrics.macro_f1(pred, truth)), "accuracy": _r(sum(p == t for p, t in zip(pred, truth)) / max(1, len(truth))),
                    "majority_class_macro_f1": _r(metrics.macro_f1([major] * len(truth), truth)), "n": len(truth)}
        if self.kind == "log_regression":
            truth = y[keep, 0]
            pred = torch.log1p(out[keep, 0])
            return {"mae_log_tokens": _r(float((pred - truth).abs().mean())),
                    "baseline_mae_log_tokens": _r(float((baseline[0] - truth).abs().mean())),
                    "median_ratio_error": _r(float(torch.exp((pred - truth).abs()).median())),
                    "pearson_log": _r(metrics.pearson(pred.tolist(), truth.tolist())), "n": int(keep.sum())}
        truth = y[keep, 0]
        pred = out[keep, 0]
        if self.name in ("pii", "injection"):
            t, p = truth.int().tolist(), pred.tolist()
            tp = sum(1 for a, b in zip(p, t) if a >= 0.5 and b)
            fp = sum(1 for a, b in zip(p, t) if a >= 0.5 and not b)
            fn = sum(1 for a, b in zip(p, t) if a < 0.5 and b)
            neg = max(1, t.count(0))
            return {"auc": _r(metrics.auc(p, t)), "f1_at_0.5": _r(2 * tp / max(1, 2 * tp + fp + fn)),
                    "false_positive_rate_at_0.5": _r(fp / neg), "positives": sum(t), "negatives": t.count(0)}
        return {"mae": _r(float((pred - truth).abs().mean())), "baseline_mae": _r(float((baseline[0] - truth).abs().mean())),
                "pearson": _r(metrics.pearson(pred.tolist(), truth.tolist())),
                "auc_hard_vs_easy": _r(metrics.auc(pred.tolist(), (truth > 0.5).int().tolist())), "n": int(keep.sum())}


def _r(x: float | None) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else round(float(x), 4)


SPECS: dict[str, HeadSpec] = {s.name: s for s in (
    HeadSpec("quality", "multilabel", "per-model probability of a correct answer"),
    HeadSpec("output_length", "log_regression", "expected completion tokens (geometric mean over recorded models)"),
    HeadSpec("domain", "multiclass", "topic class derived from the data source / MMLU subject"),
    HeadSpec("difficulty", "probability", "share of evaluated models that answered incorrectly"),
    # Local features (an e-mail address, a phrase of a jailbreak): the mean over every token
    # dilutes them, the max keeps them (docs/CLASSIFIER.md, shared trunk vs full LoRA).
    HeadSpec("pii", "probability", "the prompt carries personal data (contact details, ids, card numbers)", "max"),
    HeadSpec("injection", "probability", "prompt-injection / jailbreak attempt", "max"),
)}
