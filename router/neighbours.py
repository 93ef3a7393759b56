"""A local (nearest-neighbour) estimate of per-model quality, combined with the heads'.

The quality head predicts every model's chance of a good answer from the prompt alone.
Outcome data holds what the models actually did on similar prompts. :func:`blend` treats
the head's prediction as a prior worth ``kappa`` observations and the recorded scores of
the ``k`` nearest outcome rows (cosine similarity of the same encoder's embeddings) as
observations, and returns the posterior mean (a beta-binomial update with the head's
prediction as the prior mean):

    q_j = (kappa * head_j + sum_{i in kNN} score_ij) / (kappa + k)

With ``kappa = 0`` this is RouterBench's KNN router (mean score of the k nearest prompts,
Hu et al. 2024, arXiv:2403.12031); with ``k = 0`` it is the head alone.

Defaults (:data:`K`, :data:`KAPPA`) were chosen on the classifier's ``calib`` split of
``../shared/data`` (the heads' fitting never saw it), never on the held-out ``test`` split;
see docs/EVALUATION.md (issue 4). ``k = 40`` is one of RouterBench's three settings
(5, 10, 40): on binary outcomes, a wider neighbourhood is a less noisy estimate.
"""

from __future__ import annotations

import numpy as np

#: Neighbours per prompt.
K = 40
#: Weight of the head's prediction, in neighbours.
KAPPA = 10.0
#: Test rows per similarity block (bounds memory: block x n_memory floats).
BLOCK = 1024


def nearest(memory: np.ndarray, queries: np.ndarray, k: int = K) -> np.ndarray:
    """``(n_queries, k')`` indices of each query's ``k' = min(k, n_memory)`` most similar
    memory rows (dot product of L2-normalised embeddings = cosine similarity)."""
    memory = np.asarray(memory, np.float32)
    queries = np.asarray(queries, np.float32)
    k = min(k, len(memory))
    out = np.empty((len(queries), k), dtype=int)
    if k == 0:
        return out
    for s in range(0, len(queries), BLOCK):
        # memory @ q.T walks the C-ordered memory rows once for all queries (BLAS gemm on
        # its native layout); q @ memory.T reads it transposed, about 2x slower from 4 queries
        # on, and this scan is most of the outcome memory's cost per request.
        sims = (memory @ queries[s:s + BLOCK].T).T
        out[s:s + BLOCK] = np.argpartition(-sims, k - 1, axis=1)[:, :k]
    return out


def observations(neighbour_scores: np.ndarray, kappa: float = KAPPA) -> np.ndarray:
    """``(n, m)`` observations behind each :func:`blend` estimate: ``kappa`` (the head's
    weight) plus the neighbours with a recorded score for that model. The blend is the mean
    of a Beta posterior with this many pseudo-observations, so its posterior standard
    deviation is ``sqrt(q (1 - q) / (observations + 1))`` (:func:`posterior_sd`)."""
    nb = np.asarray(neighbour_scores, float)
    return kappa + (~np.isnan(nb)).sum(axis=1)


def posterior_sd(quality: np.ndarray | float, n: np.ndarray | float) -> np.ndarray:
    """Standard deviation of a Beta posterior with mean ``quality`` and ``n``
    pseudo-observations (``a + b = n``): ``sqrt(q (1 - q) / (n + 1))`` (the Beta
    distribution's variance ``ab / ((a + b)^2 (a + b + 1))``)."""
    q = np.clip(np.asarray(quality, float), 0.0, 1.0)
    return np.sqrt(q * (1 - q) / (np.asarray(n, float) + 1))


def blend(head: np.ndarray, neighbour_scores: np.ndarray, kappa: float = KAPPA) -> np.ndarray:
    """Posterior mean quality (see the module docstring). A NaN score means "not recorded":
    that neighbour does not count for that model, which then has fewer observations,
    ``(kappa * head_j + sum of its recorded scores) / (kappa + their number)``.

    Args:
        head: ``(n, m)`` the head's predicted quality per prompt and model.
        neighbour_scores: ``(n, k, m)`` recorded scores of each prompt's neighbours (NaN: none).
        kappa: the head's weight in neighbours (>= 0).

    Raises:
        ValueError: negative ``kappa``, mismatched shapes, or nothing to average.
    """
    head = np.asarray(head, float)
    nb = np.asarray(neighbour_scores, float)
    if kappa < 0:
        raise ValueError(f"kappa must be >= 0, got {kappa}")
    if nb.ndim != 3 or nb.shape[0] != head.shape[0] or nb.shape[2] != head.shape[1]:
        raise ValueError(f"neighbour scores {nb.shape} do not match head predictions {head.shape}")
    k = nb.shape[1]
    if kappa + k == 0:
        raise ValueError("kappa = 0 and no neighbours: nothing to estimate from")
    known = ~np.isnan(nb)
    return (kappa * head + np.where(known, nb, 0.0).sum(axis=1)) / (kappa + known.sum(axis=1))


def recorded_means(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(means, counts)``, each ``(M,)``: every model's mean over the rows of ``scores``
    ``(N, M)`` where it is recorded (NaN: not recorded), NaN for a model recorded nowhere,
    and how many rows that mean is over."""
    s = np.asarray(scores)
    known = ~np.isnan(s)
    counts = known.sum(axis=0)
    sums = np.where(known, s, 0.0).sum(axis=0)
    return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan), counts


#: Recorded scores of a model in a group below which :func:`task_smoothed` leaves that
#: model's scores in the group as recorded (a mean of a handful of rows is noise itself).
MIN_GROUP_ROWS = 20


def task_smoothed(scores: np.ndarray, groups: np.ndarray, weight: float) -> np.ndarray:
    """Each recorded score moved ``weight`` of the way to its model's mean over the rows of
    the same group (the same task of the same source):

        s'_ij = weight * mean_{i' in g(i), s_i'j recorded}(s_i'j) + (1 - weight) * s_ij

    Why: within one task the recorded outcome of a neighbour is a draw of 0 or 1 whose
    expectation its task mostly decides; a 100-neighbour mean of such draws varies from
    prompt to prompt by binomial noise (sd 0.03-0.05), which the route's allocation then
    spends on the prompts where the noise flatters a cheap model (the optimizer's curse:
    Smith & Winkler, Management Science 52(3), 2006). Shrinking each outcome towards its
    group's mean (the empirical-Bayes shrinkage of grouped binomial data towards the group
    mean; Efron & Morris, JASA 70(350), 1975) keeps the task-level signal of which
    neighbours a prompt has and drops most of that noise. Each model's mean is taken over
    its own recorded rows of that group only, and groups never mix sources, so a model
    recorded on a harder source is not compared with means of an easier one
    (docs/CALIBRATION.md, "Task-smoothed neighbour outcomes").

    Args:
        scores: ``(N, M)`` recorded scores in [0, 1], NaN where not recorded.
        groups: ``(N,)`` integer group of each row.
        weight: in [0, 1]; 0 returns the scores as recorded.

    Returns:
        ``(N, M)`` float32, NaN where ``scores`` is NaN. A model with fewer than
        :data:`MIN_GROUP_ROWS` recorded scores in a group keeps them there as recorded.

    Raises:
        ValueError: ``weight`` outside [0, 1] or ``groups`` not ``(N,)``.
    """
    s = np.asarray(scores, np.float32)
    g = np.asarray(groups)
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"task smoothing weight must be in [0, 1], got {weight}")
    if g.shape != (len(s),):
        raise ValueError(f"groups {g.shape} do not match {len(s)} score rows")
    out = s.copy()
    if weight == 0.0 or not len(s):
        return out
    for group in np.unique(g):
        rows = g == group
        means, counts = recorded_means(s[rows])
        shrunk = weight * means + (1.0 - weight) * s[rows]
        out[rows] = np.where(counts >= MIN_GROUP_ROWS, shrunk, s[rows])  # NaN stays NaN
    return out.astype(np.float32)
