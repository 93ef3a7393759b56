"""``mixroute``'s heads fitted on ``--train`` rows (``mixroute eval --train``).

The classifier's own training recipe (:func:`router.classify.train.train_heads`, as
``mixroute train`` runs it; docs/CLASSIFIER.md) on the train rows of one test dataset:

- heads: ``quality`` (one calibrated output per model of the rows) and, when the rows
  record responses, ``output_length`` (expected completion tokens);
- split: the rows whose prompt hash puts them in the classifier's ``calib`` split (10%,
  :func:`router.classify.data.split_of`) fit the Platt calibration, every other row trains
  (the test rows of the evaluation are never among them: :func:`router.eval.runner.train_for`
  drops shared prompts);
- features: the frozen trunk's hidden states (the layers below the adapted one) of every
  train prompt, computed in the classifier's resolved precision
  (:func:`router.classify.precision.resolve_dtype`) and cached on disk as float16 per prompt
  (:class:`router.eval.cache.ShardStore`, kind ``trunk``, under ``$MIXROUTE_CACHE_DIR``),
  so a second run (or another test dataset with the same train prompts) only trains;
- the heads are written to a temporary folder and loaded from it as the gateway loads
  its heads (:func:`router.classify.load_predictor`, the quality and output-length heads only).
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from router.eval.cache import ShardStore
from router.eval.data import EvalData

Progress = Callable[[str, int, int], None]

#: The heads ``mixroute`` reads in evaluation (the others do not change its decisions here).
HEADS = ("quality", "output_length")


def fit_key(train: EvalData, seed: int) -> str:
    """A digest of the rows, models and seed: equal keys give equal heads."""
    h = hashlib.sha256(repr((train.models, seed)).encode())
    for p in train.prompts:
        h.update(p.encode("utf-8", "replace") + b"\0")
    h.update(np.ascontiguousarray(train.scores, dtype=np.float64).tobytes())
    if train.response_tokens is not None:
        h.update(np.ascontiguousarray(train.response_tokens, dtype=np.float64).tobytes())
    return h.hexdigest()[:16]


def _rows(train: EvalData) -> list[Any]:
    from router.classify.data import Row

    rows = []
    for i, prompt in enumerate(train.prompts):
        tokens = [] if train.response_tokens is None else \
            [int(t) for t in train.response_tokens[i] if np.isfinite(t)]
        rows.append(Row(text=prompt, source=train.name, task=train.name,
                        scores={m: float(s) for m, s in zip(train.models, train.scores[i])}, response_tokens=tokens))
    return rows


def trunk_states(texts: list[str], upto: int, max_tokens: int = 128, head_tokens: int = 32,
                 base_path: Path | None = None, root: Path | None = None,
                 progress: Progress | None = None) -> list[Any]:
    """Frozen hidden states entering layer ``upto`` of the base encoder, per text: one
    ``(T_i, 384)`` float16 torch tensor (``T_i`` tokens after the head + tail cut), from the
    disk cache where present, computed (and cached) otherwise.

    Raises:
        router.classify.ClassifierUnavailable: torch or the base encoder package is missing.
    """
    import torch

    from router.classify import default_base_path
    from router.classify.precision import resolve_dtype
    from router.classify.runtime import BaseEncoder
    from router.classify.train import BASE_NAME, cache_trunk

    dtype = resolve_dtype("auto", "cpu")
    store = ShardStore("trunk", f"{BASE_NAME}-upto{upto}-{max_tokens}-{head_tokens}-{dtype}", root)
    keys = [store.key(t) for t in texts]
    have = store.get(keys)
    todo = sorted({k: t for k, t in zip(keys, texts) if k not in have}.items())
    if todo:
        base = BaseEncoder.from_pretrained(base_path or default_base_path(), max_tokens=max_tokens,
                                           head_tokens=head_tokens, name=BASE_NAME)
        base.to(torch.device("cpu"), getattr(torch, dtype))
        states = cache_trunk(base, [t for _, t in todo], upto, progress)
        new = {k: s.numpy() for (k, _), s in zip(todo, states)}
        store.put(new)
        have.update(new)
    return [torch.from_numpy(np.ascontiguousarray(have[k], dtype=np.float16)) for k in keys]


def fit_heads(train: EvalData, seed: int = 0, epochs: int = 3, progress: Progress | None = None,
              base_path: Path | None = None) -> Any:
    """Fit the :data:`HEADS` on ``train`` (see the module docstring) and load them.

    Args:
        train: the train rows (restricted to the test dataset's models).
        seed: seed of initialisation and batch order.
        epochs: passes over the train split (the shipped heads used 3).
        progress: ``(label, done, total)`` callback.
        base_path: a local encoder folder (default: the bundled MiniLM).

    Returns:
        A :class:`router.classify.predictor.ClassifierPredictor` over the fitted heads
        (``close()`` it when done); its ``fitted`` attribute says what was fit, e.g.
        ``{"quality": {"train": 270, "calib": 30}, ...}`` (rows per split).

    Raises:
        router.classify.ClassifierUnavailable: torch, peft or the encoder package is missing.
        ValueError: fewer than two train rows.
    """
    from router.classify import load_predictor
    from router.classify.data import split_of
    from router.classify.train import TrainConfig, train_heads

    if train.n < 2:
        raise ValueError(f"{train.n} train row(s): too few to fit heads")
    heads = ["quality"] + (["output_length"] if train.response_tokens is not None else [])
    with tempfile.TemporaryDirectory(prefix="mixroute-eval-heads-") as tmp:
        cfg = TrainConfig(data=Path(train.path.split(",")[0]), out=Path(tmp), heads=heads, seed=seed, epochs=epochs,
                          base_path=base_path)
        rows = _rows(train)
        splits = ["calib" if split_of(r.text) == "calib" else "train" for r in rows]
        states = trunk_states([r.text for r in rows], min(cfg.layers), cfg.max_tokens, cfg.head_tokens,
                              base_path, progress=progress)
        configs = train_heads(cfg, _base(cfg), rows, splits, states, progress)
        predictor = load_predictor(Path(tmp), heads=heads, base_path=base_path, scan_chars=0)
    predictor.fitted = {name: c.data.get("rows", {}) for name, c in configs.items()}
    return predictor


def _base(cfg: Any) -> Any:
    """The float32 base the trainable top layer is built on (the trunk ran separately)."""
    from router.classify.runtime import BaseEncoder
    from router.classify import default_base_path

    return BaseEncoder.from_pretrained(cfg.base_path or default_base_path(), max_tokens=cfg.max_tokens,
                                       head_tokens=cfg.head_tokens, name=cfg.base_name)
