"""The local (nearest-neighbour) quality estimate combined with the head's prior."""

from __future__ import annotations

import numpy as np
import pytest

from router.neighbours import blend, nearest, observations, posterior_sd


def test_nearest_finds_the_most_similar_rows():
    memory = np.eye(4, dtype=np.float32)
    queries = np.array([[0.9, 0.1, 0, 0], [0, 0, 0.2, 0.8]], dtype=np.float32)
    nn = nearest(memory, queries, k=1)
    assert nn[:, 0].tolist() == [0, 3]
    assert sorted(nearest(memory, queries[:1], k=2)[0].tolist()) == [0, 1]
    assert nearest(memory, queries, k=10).shape == (2, 4)  # k capped at the memory size


def test_nearest_is_the_top_k_of_every_similarity():
    """The k most similar rows by a full sort of ``q . m`` (any layout of the product), for
    one query and a batch, on memory shaped like the shipped one (rows x 128)."""
    rng = np.random.default_rng(0)
    memory = rng.standard_normal((3_000, 128)).astype(np.float32)
    memory /= np.linalg.norm(memory, axis=1, keepdims=True)
    for queries in (memory[:1] + 0.01, rng.standard_normal((7, 128)).astype(np.float32)):
        want = np.argsort(-(queries.astype(np.float64) @ memory.T.astype(np.float64)), axis=1)[:, :40]
        got = nearest(memory, queries, k=40)
        assert [set(r) for r in got.tolist()] == [set(r) for r in want.tolist()]


def test_blend_is_the_posterior_mean_with_the_head_as_prior():
    head = np.array([[0.9, 0.1]])
    scores = np.array([[[0, 1], [0, 1], [1, 1], [0, 0]]], dtype=float)  # (1 prompt, 4 neighbours, 2 models)
    q = blend(head, scores, kappa=4)
    assert q == pytest.approx(np.array([[(4 * 0.9 + 1) / 8, (4 * 0.1 + 3) / 8]]))
    assert blend(head, scores, kappa=0) == pytest.approx(scores.mean(axis=1))  # RouterBench's KNN
    assert blend(head, scores[:, :0], kappa=3) == pytest.approx(head)  # no neighbours: the head


def test_blend_counts_only_recorded_scores():
    head = np.array([[0.9, 0.1]])
    scores = np.array([[[0, np.nan], [1, np.nan], [1, 1]]])  # model 2 recorded on one neighbour
    assert blend(head, scores, kappa=2) == pytest.approx(np.array([[(2 * 0.9 + 2) / 5, (2 * 0.1 + 1) / 3]]))


def test_observations_and_posterior_sd_of_the_blend():
    scores = np.array([[[0, np.nan], [1, np.nan], [1, 1]]])
    n = observations(scores, kappa=2)
    assert n.tolist() == [[5.0, 3.0]]  # kappa + recorded neighbours, per model
    # Beta(a, b) with a + b = n and mean q: variance q (1 - q) / (n + 1); e.g. Beta(1, 1) (n 2, q 0.5) is uniform, var 1/12
    assert posterior_sd(0.5, 2) == pytest.approx((1 / 12) ** 0.5)
    assert posterior_sd(np.array([0.0, 1.0, 0.8]), np.array([10, 10, 49])).tolist() == pytest.approx([0, 0, 0.4 / np.sqrt(50)])
    assert posterior_sd(1.2, 10) == 0.0  # clipped to [0, 1]


def test_blend_rejects_bad_input():
    with pytest.raises(ValueError, match="kappa"):
        blend(np.zeros((1, 2)), np.zeros((1, 3, 2)), kappa=-1)
    with pytest.raises(ValueError, match="do not match"):
        blend(np.zeros((1, 2)), np.zeros((1, 3, 3)))
    with pytest.raises(ValueError, match="nothing"):
        blend(np.zeros((1, 2)), np.zeros((1, 0, 2)), kappa=0)


def test_task_smoothed_moves_each_recorded_score_towards_its_groups_mean():
    from router.neighbours import MIN_GROUP_ROWS, task_smoothed

    n = MIN_GROUP_ROWS
    # group 0: model a right on 3 of 4 rows repeated, model b not recorded; group 1: a always wrong
    a0 = np.tile([1.0, 1.0, 1.0, 0.0], n // 4)
    scores = np.column_stack([np.r_[a0, np.zeros(n)], np.r_[np.full(n, np.nan), np.ones(n)]]).astype(np.float32)
    groups = np.r_[np.zeros(n, int), np.ones(n, int)]
    out = task_smoothed(scores, groups, 0.5)
    mean = a0.mean()  # 0.75
    assert out[0, 0] == pytest.approx(0.5 * mean + 0.5 * 1.0)
    assert out[3, 0] == pytest.approx(0.5 * mean + 0.5 * 0.0)
    assert np.isnan(out[:n, 1]).all()  # never recorded there: stays unrecorded
    assert (out[n:, 0] == 0.0).all() and (out[n:, 1] == 1.0).all()  # a group's own mean, not the other's
    full = task_smoothed(scores, groups, 1.0)
    assert full[:n, 0] == pytest.approx(np.full(n, mean))
    np.testing.assert_array_equal(task_smoothed(scores, groups, 0.0), scores)


def test_task_smoothed_leaves_small_groups_as_recorded_and_refuses_bad_input():
    from router.neighbours import MIN_GROUP_ROWS, task_smoothed

    scores = np.array([[1.0], [0.0]] * 3, np.float32)
    assert len(scores) < MIN_GROUP_ROWS
    np.testing.assert_array_equal(task_smoothed(scores, np.zeros(6, int), 1.0), scores)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        task_smoothed(scores, np.zeros(6, int), 1.5)
    with pytest.raises(ValueError, match="groups"):
        task_smoothed(scores, np.zeros(5, int), 0.5)
