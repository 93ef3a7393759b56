"""Every row's quality estimate for ``bench.replay_sensitivity``: the gateway's own path
(the shipped heads, the outcome memory read with ``k`` neighbours), the same estimator
cross-fitted on the data itself (each row from the rows of the other folds), and the
diagnostics that replace part of each estimate (``--task-means``, ``--domain-means``).

Shapes: ``n`` rows, ``M`` data models (columns in the data's model order).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from router.neighbours import posterior_sd


#: The encoder path ``heads_and_embeddings`` runs (``main``'s ``--dtype`` / ``--linear``), and
#: the one it resolved to on this machine (set by the first call).
ENCODER = {"dtype": "auto", "linear": "auto"}
RESOLVED: dict[str, str] = {}


def _top(domain) -> str | None:
    """The most probable label of a ``domain`` head output (``{label: probability}`` or a label)."""
    if isinstance(domain, dict):
        return max(domain, key=domain.get) if domain else None
    return domain


def heads_and_embeddings(prompts: list[str]):
    """``(memory, head, emb, lengths, domains)``: the shipped outcome memory, the quality
    head's outputs ``(n, labels)`` without it, the encoder's embeddings ``(n, 384)``, the
    ``output_length`` head's estimates ``(n,)`` (tokens) and the ``domain`` head's most
    probable domain ``(n,)`` (text; ``"None"`` without that head), from the gateway's own
    path (:meth:`ClassifierPredictor.classify_batch_embed`, batches of 64) with the encoder
    precision :data:`ENCODER` asks for (resolved values recorded in :data:`RESOLVED`)."""
    from router.classify import load_predictor

    pred = load_predictor(None, scan_chars=0, exclude_exact=True, memory=True, max_batch=64, **ENCODER)
    RESOLVED.update(dtype=str(pred.encoder.dtype).removeprefix("torch."), linear=str(pred.encoder.linear))
    mem, pred.memory = pred.memory, None  # head outputs unblended; callers blend per k
    try:
        heads, embs, lengths, domains = [], [], [], []
        for i in range(0, len(prompts), 64):
            out, emb = pred.classify_batch_embed(prompts[i:i + 64])
            heads += [[o["quality"][label] for label in mem.labels] for o in out]
            lengths += [o.get("output_length", np.nan) for o in out]
            domains += [str(_top(o.get("domain"))) for o in out]
            embs.append(emb.numpy())
    finally:
        pred.close()
    return mem, np.array(heads), np.concatenate(embs), np.array(lengths, float), np.array(domains)


def model_columns(labels: list[str], models: list[str]) -> list[int]:
    """The head's label column of each data model (as the gateway matches them)."""
    from router.classify.labels import label_lookup, match_label

    lookup = label_lookup(labels)
    return [labels.index(match_label(lookup, m)) for m in models]


def predictions(prompts: list[str], models: list[str], ks: list[int]
                ) -> tuple[dict[int, tuple[np.ndarray, np.ndarray]], np.ndarray]:
    """``({k: (quality, sd)}, output_tokens)``, each ``(len(prompts), len(models))`` and
    ``(len(prompts),)``: the shipped heads blended
    with the shipped memory read with ``k`` neighbours (the gateway's own path,
    :meth:`ClassifierPredictor.classify_batch_embed`, run without the memory for the head's
    outputs and embeddings, then :meth:`OutcomeMemory.blend` with ``k`` changed)."""
    mem, head, emb, lengths, _ = heads_and_embeddings(prompts)
    cols = model_columns(mem.labels, models)
    out = {}
    for k in ks:
        q, n = replace(mem, k=k).blend(head, emb, exclude_exact=True, with_n=True)
        q, n = np.round(q[:, cols], 4), n[:, cols]
        out[k] = (q, posterior_sd(q, n))
    return out, lengths


def crossfit_predictions(prompts: list[str], score: np.ndarray, models: list[str], ks: list[int], folds: int,
                         seed: int = 0, domain_means: float = 0.0, smoothing: float = 0.0,
                         groups: np.ndarray | None = None) -> tuple[dict[int, tuple[np.ndarray, np.ndarray]], np.ndarray]:
    """``({k: (quality, sd)}, output_tokens)`` as :func:`predictions`, but with the outcome memory of each
    prompt made of the data's rows in the other ``folds`` - 1 folds (rows assigned to folds
    by a permutation seeded with ``seed``) instead of the shipped memory: every row is then
    estimated from rows it is not, so all of them can be replayed as new ones (K-fold
    cross-fitting). The head is the shipped one; neighbours by cosine similarity of the
    full 384-dimensional embeddings (the shipped memory uses its 128 principal components);
    the blend and its posterior sd as the gateway's (:func:`router.neighbours.blend`,
    ``kappa`` as shipped).

    Args:
        score: ``(n, M)`` recorded scores over ``models`` (NaN: not recorded).
        domain_means: ``a`` in [0, 1]: each estimate becomes ``a x`` the mean recorded
            score of the other folds' rows that the shipped ``domain`` head puts in the
            row's domain, ``+ (1 - a) x`` the estimate above (a diagnostic of a per-request
            task signal, ``--domain-means``; rows of a domain with fewer than
            :data:`MIN_DOMAIN_ROWS` such rows keep their estimate). Sd's as above.
        smoothing, groups: the other folds' recorded scores shrunk ``smoothing`` of the way
            to their group's mean (:func:`router.neighbours.task_smoothed`, groups ``(n,)``:
            each row's file, as the shipped memory groups its rows by source and task)
            before the neighbours read them (``--task-smoothing``)."""
    from router.neighbours import blend, nearest, observations, task_smoothed

    mem, head, emb, lengths, domains = heads_and_embeddings(prompts)
    head = head[:, model_columns(mem.labels, models)]
    emb = emb.astype(np.float32)
    emb /= np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
    parts = np.array_split(np.random.default_rng(seed).permutation(len(prompts)), folds)
    out = {}
    for k in ks:
        q, n = np.zeros_like(head), np.zeros_like(head)
        for part in parts:
            rest = np.setdiff1d(np.arange(len(prompts)), part)
            known = task_smoothed(score[rest], groups[rest], smoothing) if smoothing else score[rest]
            nb = known[nearest(emb[rest], emb[part], k)]  # (len(part), k, M)
            q[part], n[part] = blend(head[part], nb, mem.kappa), observations(nb, mem.kappa)
            if domain_means:
                q[part] = blend_domain_means(q[part], score[rest], domains[part], domains[rest], domain_means)
        q = np.round(q, 4)
        out[k] = (q, posterior_sd(q, n))
    return out, lengths


#: Rows of a domain (in the other folds) below which ``--domain-means`` leaves the estimate alone.
MIN_DOMAIN_ROWS = 20


def blend_domain_means(quality: np.ndarray, memory_scores: np.ndarray, domains: np.ndarray,
                       memory_domains: np.ndarray, weight: float) -> np.ndarray:
    """``(n, M)``: ``weight x`` the mean recorded score of the memory rows of each row's
    domain ``+ (1 - weight) x quality`` (see :func:`crossfit_predictions`).

    Args:
        quality: ``(n, M)`` estimates; domains: ``(n,)`` their domains.
        memory_scores: ``(N, M)`` recorded scores (NaN: not recorded); memory_domains: ``(N,)``.
        weight: in [0, 1]."""
    from router.neighbours import recorded_means

    out = np.array(quality, float, copy=True)
    for d in set(domains.tolist()):
        rows, mem = domains == d, memory_domains == d
        if mem.sum() < MIN_DOMAIN_ROWS:
            continue
        means, _ = recorded_means(memory_scores[mem])
        mix = weight * means + (1 - weight) * out[rows]
        out[rows] = np.where(np.isnan(mix), out[rows], mix)  # a model never recorded there keeps its estimate
    return out


def source_means(quality: np.ndarray, sources: np.ndarray) -> np.ndarray:
    """``(n, M)`` each row's estimate replaced by the mean estimate over the rows of its
    source file: what a router told each request's task would decide on if it kept the
    estimator's per-task level and dropped its per-row variation (``--task-means``, a
    diagnostic of how much that variation, mostly noise within a task, costs the route; no
    gateway knows the task). Sd's are left as they are."""
    out = np.array(quality, float, copy=True)
    for src in set(sources.tolist()):
        rows = sources == src
        out[rows] = out[rows].mean(axis=0)
    return np.round(out, 4)
