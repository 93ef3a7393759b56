"""The parts of ``python -m bench.generalisation``: one encoder pass per prompt (cached),
near-duplicate groups and their folds, and the gateway's quality estimate rebuilt from a
fold's rows.

Why its own cache and not the eval embedding cache (:mod:`router.eval.cache`): the
cross-validation needs the quality head's raw outputs *and* the base embedding of every
prompt of ``../shared/data``, and re-blends them with a different outcome memory
per fold; the shipped heads' pass yields both at once (``classify_batch_embed``), so one
encoder pass per prompt serves every fold and every rerun. The file is keyed by the quality
head's weights and the encoder's precision, so vectors of another head or precision are
never mixed in.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from backends.data import normalise_prompt
from router.classify.memory import OutcomeMemory, build, score_matrix, task_groups
from router.eval import routers as registry
from router.eval.data import EvalData
from router.eval.routers.base import Context, ScoreRouter

#: Cosine similarity at or above which two prompts count as near duplicates and share a
#: fold (and leave the memory together). The outcome memory's own "the prompt itself"
#: threshold (:data:`router.classify.memory.EXACT`) is 0.995; 0.98 also joins rewordings
#: and the same question in two sources' formats.
DUPLICATE = 0.98
BATCH = 64


def prompt_key(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8", "replace")).hexdigest()


@dataclass
class Signals:
    """Per prompt: the quality head's calibrated outputs (``quality`` ``(n, M)`` in
    :attr:`labels` order), its ``output_length`` (``(n,)``, NaN without that head) and the
    base embedding (``emb`` ``(n, D)``, L2-normalised), rows in the order asked for."""

    labels: list[str]
    quality: np.ndarray
    output_length: np.ndarray
    emb: np.ndarray


class HeadSignals:
    """The shipped (or ``adapters``) ``quality`` and ``output_length`` heads and the base
    embedding of each prompt, from one encoder pass per prompt, cached in ``cache_dir``."""

    def __init__(self, cache_dir: Path, adapters: Path | None = None, progress: Any = None):
        from router.classify import default_adapters_dir, load_predictor

        self.adapters = adapters or default_adapters_dir()
        self.progress = progress
        self.predictor = load_predictor(self.adapters, heads=["quality", "output_length"], scan_chars=0,
                                        memory=False, embed=True)
        self.predictor.close()  # classify_batch_embed is called directly
        self.labels = list(self.predictor.quality_labels)
        enc = self.predictor.encoder
        weights = (self.adapters / "quality" / "head.safetensors").read_bytes()
        tag = f"{hashlib.sha256(weights).hexdigest()[:12]}-{str(enc.dtype).removeprefix('torch.')}-" \
              f"{getattr(enc, 'linear', 'default')}"
        cache_dir.mkdir(parents=True, exist_ok=True)
        self.path = cache_dir / f"signals-{tag}.npz"
        self._rows: dict[str, tuple[np.ndarray, float, np.ndarray]] = {}
        if self.path.is_file():
            z = np.load(self.path)
            for k, q, o, e in zip(z["keys"], z["quality"], z["output_length"], z["emb"]):
                self._rows[str(k)] = (q, float(o), e)

    def head_model(self, backend: Any) -> str | None:
        return self.predictor.head_model(backend)

    def __call__(self, texts: list[str]) -> Signals:
        todo = sorted({t for t in texts if prompt_key(t) not in self._rows}, key=len)
        for s in range(0, len(todo), BATCH):
            chunk = todo[s:s + BATCH]
            outs, emb = self.predictor.classify_batch_embed(chunk)
            emb = emb.numpy().astype(np.float16)
            for t, o, e in zip(chunk, outs, emb):
                q = np.array([o["quality"][lab] for lab in self.labels], np.float32)
                self._rows[prompt_key(t)] = (q, float(o.get("output_length", np.nan)), e)
            if self.progress:
                self.progress("encoder pass", min(s + BATCH, len(todo)), len(todo))
        if todo:
            self._save()
        rows = [self._rows[prompt_key(t)] for t in texts]
        emb = np.stack([r[2] for r in rows]).astype(np.float32)
        emb /= np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
        return Signals(self.labels, np.stack([r[0] for r in rows]), np.array([r[1] for r in rows]), emb)

    def _save(self) -> None:
        keys = list(self._rows)
        tmp = self.path.with_suffix(f".{os.getpid()}.tmp.npz")
        np.savez(tmp, keys=np.array(keys), quality=np.stack([self._rows[k][0] for k in keys]),
                 output_length=np.array([self._rows[k][1] for k in keys], np.float32),
                 emb=np.stack([self._rows[k][2] for k in keys]))
        tmp.replace(self.path)


def duplicate_groups(texts: list[str], emb: np.ndarray, threshold: float = DUPLICATE, block: int = 1024) -> np.ndarray:
    """``(n,)`` group id per prompt: connected components of "same normalised text or cosine
    similarity >= ``threshold``" (union-find), so near duplicates never straddle folds."""
    n = len(texts)
    parent = np.arange(n)

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def union(a: int, b: int) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)

    first: dict[str, int] = {}
    for i, t in enumerate(texts):
        union(i, first.setdefault(normalise_prompt(t), i))
    x = np.asarray(emb, np.float32)
    for s in range(0, n, block):
        sims = x[s:s + block] @ x.T
        rows, cols = np.nonzero(sims >= threshold)
        for a, b in zip(rows + s, cols):
            if a < b:
                union(int(a), int(b))
    return np.array([find(i) for i in range(n)])


def group_folds(texts: list[str], groups: np.ndarray, folds: int, seed: int) -> np.ndarray:
    """``(n,)`` fold per prompt: each duplicate group goes to the fold given by a seeded hash
    of its first member's normalised text (a group's rows share a fold)."""
    rep = {}
    for i, g in enumerate(groups):
        rep.setdefault(int(g), normalise_prompt(texts[i]))
    fold = {g: int(hashlib.sha1(f"{seed}:{t}".encode("utf-8", "replace")).hexdigest()[:8], 16) % folds
            for g, t in rep.items()}
    return np.array([fold[int(g)] for g in groups])


def fold_memory(rows: list[Any], keep: np.ndarray, sig: Signals, like: OutcomeMemory) -> OutcomeMemory:
    """The outcome memory the gateway would ship had it been built from ``rows[keep]`` only:
    :func:`router.classify.memory.build` with the shipped memory's ``dims``, ``k``, ``kappa``
    and ``task_smoothing`` (``like``), rows grouped as :func:`task_groups` groups them."""
    idx = np.flatnonzero(keep)
    kept = [rows[i] for i in idx]
    scores = score_matrix(kept, sig.labels)
    has = ~np.isnan(scores).all(axis=1)
    kept = [r for r, h in zip(kept, has) if h]
    dims = int(like.meta.get("dims", 0) or 0)
    return build(sig.emb[idx[has]], scores[has], sig.labels, dims=0 if dims >= sig.emb.shape[1] else dims,
                 k=like.k, kappa=like.kappa, groups=task_groups(kept), smoothing=like.smoothing)


class FoldPredictor:
    """What the ``mixroute`` eval router's ``predictor`` option takes (``classify_batch``,
    ``head_model``): the cached head outputs blended with a fold's outcome memory, exactly
    as :class:`router.classify.predictor.ClassifierPredictor` blends them
    (:meth:`OutcomeMemory.blend`). Its ``memory`` attribute tells the router that the
    outputs already are the gateway's estimate (no second, local blend)."""

    def __init__(self, signals: HeadSignals, memory: OutcomeMemory, tau: float = 0.0):
        self.signals, self.memory, self.tau = signals, memory, tau

    def head_model(self, backend: Any) -> str | None:
        return self.signals.head_model(backend)

    def classify_batch(self, texts: list[str]) -> list[dict[str, Any]]:
        sig = self.signals(texts)
        q = self.memory.blend(sig.quality, sig.emb) if not self.tau else similarity_blend(self.memory, sig, self.tau)
        out = []
        for i in range(len(texts)):
            d: dict[str, Any] = {"quality": dict(zip(sig.labels, map(float, q[i])))}
            if np.isfinite(sig.output_length[i]):
                d["output_length"] = float(sig.output_length[i])
            out.append(d)
        return out


def similarity_blend(memory: OutcomeMemory, sig: Signals, tau: float) -> np.ndarray:
    """A candidate estimate (``--variants tau=T``): the memory's blend with each neighbour
    weighted by ``exp((sim_i - max_i sim_i) / tau)``, a kernel whose bandwidth adapts to the
    prompt's nearest row (Nadaraya-Watson weights), so rows much less similar than the
    closest count less and, for a model only those rows record, the head keeps more weight:
    ``q_j = (kappa head_j + sum_i w_i s_ij) / (kappa + sum_i w_i [s_ij recorded])``."""
    idx, _ = memory.neighbours(sig.emb)
    q = memory.project(sig.emb)
    sims = np.einsum("bd,bkd->bk", q, memory.vectors[idx])
    w = np.exp((sims - sims.max(axis=1, keepdims=True)) / tau)[:, :, None]
    nb = memory.neighbour_scores[idx]
    known = ~np.isnan(nb)
    num = memory.kappa * sig.quality + (w * np.where(known, nb, 0.0)).sum(axis=1)
    return num / (memory.kappa + (w * known).sum(axis=1))


class Fixed(ScoreRouter):
    """A score router serving the out-of-fold predictions recorded for ``label`` (so that
    every row of a pooled run keeps the prediction of the fold that held it out)."""

    name = "fixed"

    def __init__(self, oof: dict[tuple[str, str], Any], label: str):
        self.oof, self.label = oof, label

    def predict(self, test: EvalData, ctx: Context) -> tuple[np.ndarray, str]:
        return np.array([self.oof[(self.label, p)] for p in test.prompts]), "out of fold"


class Recording:
    """The ``mixroute`` eval router over a :class:`Recorder` predictor."""

    def __init__(self, predictor: "Recorder"):
        self.predictor = predictor

    def run(self, test: EvalData, ctx: Context) -> Any:
        return registry.get("mixroute").run(test, ctx)


class Recorder:
    """``classify_batch`` and ``head_model`` for the ``mixroute`` eval router: the outputs of
    ``inner`` (a :class:`FoldPredictor`), recorded in ``oof`` under ``label`` for the pooled
    run, which reads them back (``inner`` ``None``). ``memory`` is set so the router takes
    the outputs as the gateway's blended estimate and adds no local blend of its own."""

    memory = True

    def __init__(self, inner: Any, oof: dict[tuple[str, str], Any], label: str, head_model: Any):
        self.inner, self.oof, self.label, self.head_model = inner, oof, label, head_model

    def classify_batch(self, texts: list[str]) -> list[dict[str, Any]]:
        if self.inner is None:
            return [self.oof[(self.label, t)] for t in texts]
        outs = self.inner.classify_batch(texts)
        self.oof.update(((self.label, t), o) for t, o in zip(texts, outs))
        return outs
