"""Outcome memory: what the models actually did on the training prompts, kept next to the
``quality`` head and blended with it at serving time.

The quality head predicts each model's chance of a good answer from the prompt alone; on
prompts unlike its training rows it ranks models poorly. The memory holds, for every
training prompt with recorded outcomes, its base-encoder embedding and every model's score,
and :meth:`OutcomeMemory.blend` combines the head with the scores of the ``k`` most similar
training prompts (:func:`router.neighbours.blend`: the head counts as ``kappa``
observations). A model without a recorded score on a neighbour simply gets fewer
observations there:

    q_j = (kappa * head_j + sum_{i in kNN, s_ij recorded} s_ij) / (kappa + #{i in kNN: s_ij recorded})

This is the estimate the ``mixroute`` evaluation router has used since issue 4
(docs/EVALUATION.md), moved into the gateway so that replay, calibration and live traffic
decide on it too. RouterBench's KNN router is the ``kappa = 0`` case (Hu et al. 2024,
arXiv:2403.12031).

Storage (``adapters/quality/memory.safetensors``, a few MB): the embeddings projected on
their top ``dims`` principal components (float16 basis and mean) and quantised to int8
with one scale per row; scores as uint8 (``round(255 x score)``; 255 with the ``known``
bit clear means "not recorded"); labels and settings in the safetensors metadata. Cosine
similarity is taken in the projected space (re-normalised). ``bench/`` and
docs/CLASSIFIER.md report what the projection costs against the full 384 dimensions.

Shapes: ``N`` memory rows, ``D`` encoder width (384), ``d`` projected width, ``M`` labels
(the quality head's models), ``B`` prompts.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from router.classify.errors import AdapterError
from router.neighbours import blend as posterior_mean
from router.neighbours import nearest, observations

#: File name inside the quality head's folder.
MEMORY_FILE = "memory.safetensors"
#: Similarity at or above which a memory row counts as the query itself (``exclude_exact``).
EXACT = 0.995
#: Neighbours per prompt of a memory built without saying (the shipped one's, in its
#: metadata). 100, not the 40 of ``mixroute eval``'s kNN (:data:`router.neighbours.K`):
#: on the classifier's ``test`` rows (neither head nor memory saw them) the blend's Brier
#: score falls from k 40 to 100 on RouterBench (0.1985 -> 0.1956) and RouteLLM (0.1603 ->
#: 0.1595) and rises by 0.0006 on RouterDC (``python -m bench.memory_eval ../shared/data
#: --source S --k 40,100``); and in 5-fold cross-fitted replays of the 2,205 RouterBench
#: rows the shipped ``route_target: 0.95`` bar realised 0.955 of always-GPT-4's quality at
#: 0.278 of its cost with 100 (mean of 9 orders) against 0.950 at 0.290 with 40
#: (docs/CALIBRATION.md, "Allocation, neighbours and prices"). Within one task the outcomes
#: of 40 neighbours barely rank the prompts (per-file AUC about 0.5), so more neighbours
#: mostly average out noise.
DEFAULT_K = 100


@dataclass
class OutcomeMemory:
    """Loaded memory (see the module docstring).

    Attributes:
        vectors: ``(N, d)`` float32, L2-normalised projected embeddings.
        scores: ``(N, M)`` float32 in [0, 1], NaN where the model's outcome is not recorded.
        labels: the ``M`` model names (the quality head's labels).
        basis: ``(D, d)`` projection; ``mean``: ``(D,)`` subtracted first. ``None``: no projection.
        k: neighbours per prompt; kappa: the head's weight, in neighbours.
        meta: provenance (rows per source, split, date, dims).
        digest: sha256 (hex, 16 characters) of the file it was loaded from; empty for a
            memory built in process. Caches of blended outputs are keyed on it.
    """

    vectors: np.ndarray
    scores: np.ndarray
    labels: list[str]
    basis: np.ndarray | None = None
    mean: np.ndarray | None = None
    k: int = DEFAULT_K
    kappa: float = 10.0
    meta: dict[str, Any] = field(default_factory=dict)
    digest: str = ""

    @property
    def n(self) -> int:
        return len(self.vectors)

    def project(self, emb: np.ndarray) -> np.ndarray:
        """``(B, D)`` embeddings -> ``(B, d)`` L2-normalised vectors in the memory's space."""
        x = np.asarray(emb, np.float32)
        if self.basis is not None:
            x = (x - self.mean) @ self.basis
        return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)

    def neighbours(self, emb: np.ndarray, *, exclude_exact: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """``(indices (B, k'), valid (B, k'))`` of each prompt's most similar memory rows
        (:func:`router.neighbours.nearest`); ``valid`` is False for rows dropped by
        ``exclude_exact`` (similarity >= :data:`EXACT`: the prompt itself, when evaluating on
        rows the memory holds), which looks one row further so that ``k`` remain."""
        q = self.project(emb)
        idx = nearest(self.vectors, q, min(self.k + (1 if exclude_exact else 0), self.n))
        valid = np.ones_like(idx, dtype=bool)
        if exclude_exact and idx.size:
            sims = np.einsum("bd,bkd->bk", q, self.vectors[idx])
            order = np.argsort(-sims, axis=1)
            idx, sims = np.take_along_axis(idx, order, axis=1), np.take_along_axis(sims, order, axis=1)
            valid = sims < EXACT
            valid &= np.cumsum(valid, axis=1) <= self.k  # the k most similar that remain
        return idx, valid

    def blend(self, head: np.ndarray, emb: np.ndarray, *, exclude_exact: bool = False,
              with_n: bool = False) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
        """Posterior mean quality ``(B, M)`` from the head's ``(B, M)`` (columns in
        :attr:`labels` order) and the prompts' ``(B, D)`` embeddings: the neighbours' recorded
        scores through :func:`router.neighbours.blend` (module docstring). ``with_n``: also
        return the ``(B, M)`` observations behind each estimate
        (:func:`router.neighbours.observations`: ``kappa`` + recorded neighbour scores).

        Raises:
            ValueError: ``head`` does not have ``M`` columns or ``B`` rows of ``emb``.
        """
        head = np.asarray(head, np.float64)
        if head.ndim != 2 or head.shape[1] != len(self.labels) or len(head) != len(emb):
            raise ValueError(f"head predictions {head.shape} do not match {len(emb)} prompts x "
                             f"{len(self.labels)} memory labels")
        idx, valid = self.neighbours(emb, exclude_exact=exclude_exact)
        nb = np.where(valid[:, :, None], self.scores[idx], np.nan)  # (B, k, M); NaN: not counted
        q = posterior_mean(head, nb, self.kappa)
        return (q, observations(nb, self.kappa)) if with_n else q

    def save(self, path: Path) -> None:
        """Write the compressed file (module docstring)."""
        from safetensors.numpy import save_file

        scale = np.maximum(np.abs(self.vectors).max(axis=1, keepdims=True), 1e-12) / 127.0
        codes = np.round(self.vectors / scale).astype(np.int8)
        known = ~np.isnan(self.scores)
        tensors = {"codes": codes, "scale": scale.astype(np.float32).ravel(),
                   "scores": np.where(known, np.round(np.nan_to_num(self.scores) * 255), 0).astype(np.uint8),
                   "known": np.packbits(known, axis=1)}
        if self.basis is not None:
            tensors["basis"] = self.basis.astype(np.float16)
            tensors["mean"] = self.mean.astype(np.float16)
        meta = {"labels": json.dumps(self.labels), "k": str(self.k), "kappa": str(self.kappa),
                "meta": json.dumps(self.meta, sort_keys=True)}
        path.parent.mkdir(parents=True, exist_ok=True)
        # safetensors writes an array's buffer as is: a transposed view would come back scrambled
        save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, str(path), metadata=meta)

    @classmethod
    def load(cls, path: Path) -> "OutcomeMemory":
        """Read a file written by :meth:`save`.

        Raises:
            AdapterError: unreadable file or inconsistent shapes.
        """
        from safetensors import safe_open

        try:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
            with safe_open(str(path), framework="numpy") as f:
                meta = f.metadata() or {}
                t = {k: f.get_tensor(k) for k in f.keys()}
            labels = json.loads(meta["labels"])
            vectors = t["codes"].astype(np.float32) * t["scale"][:, None]
            vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
            known = np.unpackbits(t["known"], axis=1, count=len(labels)).astype(bool)
            scores = np.where(known, t["scores"].astype(np.float32) / 255.0, np.nan).astype(np.float32)
            basis = t["basis"].astype(np.float32) if "basis" in t else None
            mean = t["mean"].astype(np.float32) if "mean" in t else None
            mem = cls(vectors, scores, labels, basis, mean, int(meta.get("k", DEFAULT_K)), float(meta.get("kappa", 10.0)),
                      json.loads(meta.get("meta", "{}")), digest)
        except Exception as exc:  # safetensors, json, key or shape errors: one message
            raise AdapterError(f"outcome memory {path}: cannot read ({exc})") from exc
        if scores.shape != (len(vectors), len(labels)) or (basis is not None and basis.shape[1] != vectors.shape[1]):
            raise AdapterError(f"outcome memory {path}: shapes disagree (vectors {vectors.shape}, "
                               f"scores {scores.shape}, {len(labels)} labels)")
        return mem


def build(embeddings: np.ndarray, scores: np.ndarray, labels: list[str], *, dims: int = 0, k: int = DEFAULT_K,
          kappa: float = 10.0, meta: dict[str, Any] | None = None) -> OutcomeMemory:
    """A memory from ``(N, D)`` L2-normalised embeddings and ``(N, M)`` scores (NaN: not
    recorded). ``dims > 0`` projects on the top ``dims`` principal components of these
    embeddings (PCA by SVD of the centred rows); ``0`` keeps all ``D``.

    Raises:
        ValueError: shapes disagree, no rows, or a row with no recorded score.
    """
    x = np.asarray(embeddings, np.float32)
    s = np.asarray(scores, np.float32)
    if x.ndim != 2 or s.shape != (len(x), len(labels)) or len(x) == 0:
        raise ValueError(f"embeddings {x.shape} and scores {s.shape} do not describe the same rows x {len(labels)} labels")
    if np.isnan(s).all(axis=1).any():
        raise ValueError("every memory row needs at least one recorded score")
    basis = mean = None
    if 0 < dims < x.shape[1]:
        mean = x.mean(axis=0)
        _, _, vt = np.linalg.svd(x - mean, full_matrices=False)
        basis = np.ascontiguousarray(vt[:dims].T, dtype=np.float32)
    mem = OutcomeMemory(np.zeros((0, 1), np.float32), s, list(labels), basis, mean, k, kappa, dict(meta or {}))
    mem.vectors = mem.project(x)
    return mem


def build_from_data(data: Path, adapters: Path, *, dims: int = 0, k: int = DEFAULT_K, kappa: float = 10.0,
                    limit: int | None = None, embedder: Any = None,
                    progress: Any = None) -> OutcomeMemory:
    """The memory of ``data``'s ``train`` split (:func:`router.classify.data.split_of`, the
    quality head's own training rows; ``calib`` and ``test`` stay out of it) for the quality
    head under ``adapters`` (its labels, matched to the data's model names as the gateway
    matches backends, :func:`router.classify.labels.match_label`).

    Args:
        embedder: texts -> ``(N, D)`` L2-normalised embeddings; default the cached MiniLM
            embedder of ``mixroute eval`` (:func:`router.eval.embed.make_embedder`), which
            computes the vector the gateway's encoder computes with ``embed=True``.
        progress: ``progress(done, total)`` while embedding.

    Raises:
        FileNotFoundError: no data, or no quality head under ``adapters``.
        ValueError: no train row with a score for a known model.
    """
    from router.classify.data import load_rows, split_of
    from router.classify.heads import HeadConfig

    config_path = adapters / "quality" / "config.json"
    if not config_path.is_file():
        raise FileNotFoundError(f"no quality head at {config_path} (train it first: mixroute train --heads quality)")
    labels = HeadConfig.model_validate_json(config_path.read_text(encoding="utf-8")).labels
    rows = [r for r in load_rows(data, limit=limit) if split_of(r.text) == "train"]
    all_scores = score_matrix(rows, labels)
    keep = ~np.isnan(all_scores).all(axis=1)
    texts = [r.text for r, k in zip(rows, keep) if k]
    sources: dict[str, int] = {}
    for r in (r for r, k in zip(rows, keep) if k):
        sources[r.source] = sources.get(r.source, 0) + 1
    if not texts:
        raise ValueError(f"no train-split row of {data} has a score for a model the quality head knows")
    if embedder is None:
        from router.eval.embed import make_embedder

        embedder = make_embedder()
    x = embedder(texts, progress)
    meta = {"rows": len(texts), "sources": sources, "split": "train (sha1(normalised prompt) % 100 >= 20)",
            "dims": dims or int(x.shape[1]), "embedder": getattr(embedder, "tag", "")}
    return build(x, all_scores[keep], labels, dims=dims, k=k, kappa=kappa, meta=meta)


def score_matrix(rows: list[Any], labels: list[str], dtype: Any = np.float32) -> np.ndarray:
    """``(len(rows), len(labels))`` of ``dtype``: each :class:`router.classify.data.Row`'s recorded
    scores under the quality labels they match (as the gateway matches backends,
    :func:`router.classify.labels.match_label`); NaN where a model is not recorded or not
    a label."""
    from router.classify.labels import label_lookup, match_label

    lookup = label_lookup(labels)
    col = {lab: i for i, lab in enumerate(labels)}
    out = np.full((len(rows), len(labels)), np.nan, dtype)
    for i, row in enumerate(rows):
        for model, score in row.scores.items():
            label = match_label(lookup, model)
            if label is not None and score is not None:
                out[i, col[label]] = score
    return out
