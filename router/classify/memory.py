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

With ``task_smoothing`` ``a > 0`` the neighbours' scores are first shrunk ``a`` of the way to
their model's mean over the memory rows of the same group (source and task), once per loaded
memory (:func:`router.neighbours.task_smoothed`): within a task a neighbour's 0 or
1 is mostly noise around its task's level, and the route's allocation spends that noise on
the wrong prompts (docs/CALIBRATION.md, "Task-smoothed neighbour outcomes").

This is the estimate the ``mixroute`` evaluation router has used since issue 4
(docs/EVALUATION.md), moved into the gateway so that replay, calibration and live traffic
decide on it too. RouterBench's KNN router is the ``kappa = 0`` case (Hu et al. 2024,
arXiv:2403.12031).

Storage (``adapters/quality/memory.safetensors``, a few MB): the embeddings projected on
their top ``dims`` principal components (float16 basis and mean) and quantised to int8
with one scale per row; scores as uint8 (``round(255 x score)``; 255 with the ``known``
bit clear means "not recorded"); each row's group as uint16 (``groups``, names in the
metadata); labels and settings in the safetensors metadata. Cosine
similarity is taken in the projected space (re-normalised). ``bench/`` and
docs/BENCHMARKS.md report what the projection costs against the full 384 dimensions.

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
from router.neighbours import nearest, observations, task_smoothed

#: File name inside the quality head's folder.
MEMORY_FILE = "memory.safetensors"
#: Similarity at or above which a memory row counts as the query itself (``exclude_exact``).
EXACT = 0.995
#: Neighbours per prompt of a memory built without saying (the shipped one's, in its
#: metadata). 100, not the 40 of ``mixroute eval``'s kNN (:data:`router.neighbours.K`):
#: within one task the outcomes of a few dozen neighbours barely rank the prompts, so more
#: neighbours mostly average out noise (``python -m bench.memory_eval ../shared/data
#: --source S --k 40,100``; figures in docs/BENCHMARKS.md).
DEFAULT_K = 100
#: Share of the way each neighbour's recorded score moves to its group's mean in a memory
#: built without saying (:func:`router.neighbours.task_smoothed`; the shipped memory's);
#: docs/CALIBRATION.md, "Task-smoothed neighbour outcomes".
DEFAULT_SMOOTHING = 0.5
#: Rows of a task below which :func:`build_from_data` groups a source's rows by the task's
#: family (``mmlu:anatomy`` -> ``mmlu``) instead.
MIN_TASK_ROWS = 20



def settings_from_env() -> tuple[bool, float | None]:
    """``(memory on, task_smoothing override)`` from ``MIXROUTE_CLASSIFIER_MEMORY`` and
    ``MIXROUTE_CLASSIFIER_MEMORY_SMOOTHING``, read as the gateway's settings read them, for
    the offline commands that decide as the gateway does (``mixroute calibrate``, ``mixroute
    eval``'s ``mixroute`` router): ``off`` -> the head alone; an unset smoothing -> ``None``
    (the memory file's weight).

    Raises:
        ValueError: a smoothing set but not a number in [0, 1] (an empty value included, as
            the gateway refuses it); the message names the setting.
    """
    import math
    import os

    on = os.environ.get("MIXROUTE_CLASSIFIER_MEMORY", "on").strip().lower() != "off"
    text = os.environ.get("MIXROUTE_CLASSIFIER_MEMORY_SMOOTHING")
    if text is None:
        return on, None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0.0 <= value <= 1.0:  # NaN included
        raise ValueError(f"invalid setting MIXROUTE_CLASSIFIER_MEMORY_SMOOTHING={text!r}: a number in [0, 1], "
                         "or unset for the outcome memory's own")
    return on, value

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
        groups: ``(N,)`` int, each row's group (``group_names[g]``, e.g.
            ``routerbench/arc-challenge``); ``None``: one group (a memory written before
            groups were kept). smoothing: ``task_smoothing``, in [0, 1].
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
    groups: np.ndarray | None = None
    group_names: list[str] = field(default_factory=list)
    smoothing: float = 0.0
    _read: np.ndarray | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def n(self) -> int:
        return len(self.vectors)

    @property
    def smoothing_in_force(self) -> float:
        """The ``task_smoothing`` the neighbours are read with: :attr:`smoothing`, or 0
        for a memory without row groups (nothing to smooth towards)."""
        return self.smoothing if self.groups is not None else 0.0

    @property
    def neighbour_scores(self) -> np.ndarray:
        """``(N, M)`` the scores the neighbours contribute: :attr:`scores` shrunk to their
        group's means by :attr:`smoothing_in_force` (computed once; :attr:`scores` as
        recorded at 0)."""
        if self._read is None:
            weight = self.smoothing_in_force
            self._read = task_smoothed(self.scores, self.groups, weight) if weight else self.scores
        return self._read

    def with_smoothing(self, smoothing: float, path: Path | str = "") -> "OutcomeMemory":
        """This memory read with another ``task_smoothing`` (a copy; the arrays are shared).

        Raises:
            AdapterError: ``smoothing`` outside [0, 1], or above 0 for a memory without row
                groups (one written before groups were kept: rebuild it with ``mixroute
                train --heads memory``).
        """
        from dataclasses import replace

        where = f"outcome memory {path}" if path else "outcome memory"
        if not 0.0 <= smoothing <= 1.0:
            raise AdapterError(f"{where}: task smoothing {smoothing} is not in [0, 1]")
        if smoothing and self.groups is None:
            raise AdapterError(f"{where} keeps no task groups, so it cannot be smoothed "
                               "(rebuild it: mixroute train --heads memory)")
        return replace(self, smoothing=float(smoothing))

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
        nb = np.where(valid[:, :, None], self.neighbour_scores[idx], np.nan)  # (B, k, M); NaN: not counted
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
                "meta": json.dumps(self.meta, sort_keys=True), "task_smoothing": str(self.smoothing)}
        if self.groups is not None:
            tensors["groups"] = self.groups.astype(np.uint16)
            meta["group_names"] = json.dumps(self.group_names)
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
            groups = t["groups"].astype(np.int64) if "groups" in t else None
            mem = cls(vectors, scores, labels, basis, mean, int(meta.get("k", DEFAULT_K)), float(meta.get("kappa", 10.0)),
                      json.loads(meta.get("meta", "{}")), digest, groups, json.loads(meta.get("group_names", "[]")),
                      float(meta.get("task_smoothing", 0.0)))
        except Exception as exc:  # safetensors, json, key or shape errors: one message
            raise AdapterError(f"outcome memory {path}: cannot read ({exc})") from exc
        if scores.shape != (len(vectors), len(labels)) or (basis is not None and basis.shape[1] != vectors.shape[1]):
            raise AdapterError(f"outcome memory {path}: shapes disagree (vectors {vectors.shape}, "
                               f"scores {scores.shape}, {len(labels)} labels)")
        if groups is not None and (groups.shape != (len(vectors),) or (len(groups) and groups.max() >= len(mem.group_names))):
            raise AdapterError(f"outcome memory {path}: {len(groups)} row groups for {len(vectors)} rows and "
                               f"{len(mem.group_names)} group names")
        if not 0.0 <= mem.smoothing <= 1.0:
            raise AdapterError(f"outcome memory {path}: task_smoothing {mem.smoothing} is not in [0, 1]")
        return mem


def build(embeddings: np.ndarray, scores: np.ndarray, labels: list[str], *, dims: int = 0, k: int = DEFAULT_K,
          kappa: float = 10.0, meta: dict[str, Any] | None = None, groups: list[str] | None = None,
          smoothing: float = DEFAULT_SMOOTHING) -> OutcomeMemory:
    """A memory from ``(N, D)`` L2-normalised embeddings and ``(N, M)`` scores (NaN: not
    recorded). ``dims > 0`` projects on the top ``dims`` principal components of these
    embeddings (PCA by SVD of the centred rows); ``0`` keeps all ``D``. ``groups``: each
    row's group name (``N`` of them; ``None``: no groups, so ``task_smoothing`` 0 whatever
    ``smoothing`` says); ``smoothing``: ``task_smoothing`` (module docstring).

    Raises:
        ValueError: shapes disagree, no rows, a row with no recorded score, ``groups`` not
            ``N`` long, or ``smoothing`` outside [0, 1].
    """
    x = np.asarray(embeddings, np.float32)
    s = np.asarray(scores, np.float32)
    if x.ndim != 2 or s.shape != (len(x), len(labels)) or len(x) == 0:
        raise ValueError(f"embeddings {x.shape} and scores {s.shape} do not describe the same rows x {len(labels)} labels")
    if np.isnan(s).all(axis=1).any():
        raise ValueError("every memory row needs at least one recorded score")
    if groups is not None and len(groups) != len(x):
        raise ValueError(f"{len(groups)} group names for {len(x)} memory rows")
    if not 0.0 <= smoothing <= 1.0:
        raise ValueError(f"task smoothing must be in [0, 1], got {smoothing}")
    names = sorted(set(groups)) if groups is not None else []
    ids = np.array([names.index(g) for g in groups], np.int64) if groups is not None else None
    basis = mean = None
    if 0 < dims < x.shape[1]:
        mean = x.mean(axis=0)
        _, _, vt = np.linalg.svd(x - mean, full_matrices=False)
        basis = np.ascontiguousarray(vt[:dims].T, dtype=np.float32)
    mem = OutcomeMemory(np.zeros((0, 1), np.float32), s, list(labels), basis, mean, k, kappa, dict(meta or {}),
                        groups=ids, group_names=names, smoothing=smoothing if groups is not None else 0.0)
    mem.vectors = mem.project(x)
    return mem


def build_from_data(data: Path, adapters: Path, *, dims: int = 0, k: int = DEFAULT_K, kappa: float = 10.0,
                    limit: int | None = None, embedder: Any = None,
                    progress: Any = None, smoothing: float = DEFAULT_SMOOTHING) -> OutcomeMemory:
    """The memory of ``data``'s ``train`` split (:func:`router.classify.data.split_of`, the
    quality head's own training rows; ``calib`` and ``test`` stay out of it) for the quality
    head under ``adapters`` (its labels, matched to the data's model names as the gateway
    matches backends, :func:`router.classify.labels.match_label`).

    Args:
        embedder: texts -> ``(N, D)`` L2-normalised embeddings; default the cached MiniLM
            embedder of ``mixroute eval`` (:func:`router.eval.embed.make_embedder`), which
            computes the vector the gateway's encoder computes with ``embed=True``.
        progress: ``progress(done, total)`` while embedding.
        smoothing: ``task_smoothing`` (module docstring), over :func:`task_groups`.

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
    groups = task_groups([r for r, k in zip(rows, keep) if k])
    return build(x, all_scores[keep], labels, dims=dims, k=k, kappa=kappa, meta=meta, groups=groups,
                 smoothing=smoothing)


def task_groups(rows: list[Any]) -> list[str]:
    """Each :class:`router.classify.data.Row`'s group for ``task_smoothing``:
    ``source/task`` (``routerbench/arc-challenge``, ``routellm/mmlu:anatomy``), or
    ``source/family`` (``routellm/mmlu``) for a task with fewer than :data:`MIN_TASK_ROWS`
    rows here. Groups never mix sources: a model's mean over a group is then taken on the
    prompts every model of that source was recorded on."""
    counts: dict[tuple[str, str], int] = {}
    for r in rows:
        counts[(r.source, r.task)] = counts.get((r.source, r.task), 0) + 1
    return [f"{r.source}/{r.task}" if counts[(r.source, r.task)] >= MIN_TASK_ROWS
            else f"{r.source}/{r.task.split(':', 1)[0]}" for r in rows]


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
