"""Metric definitions on hand-made curves, and their invariants (Hypothesis)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from router.eval import metrics
from router.eval.sweep import quantile_sweep, willingness_sweep


def test_ndch_drops_dominated_and_concave_points():
    cost = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    quality = np.array([0.5, 0.55, 0.8, 0.7, 0.85])
    hx, hy = metrics.ndch(cost, quality)
    # (2, 0.55) lies under the chord (1, .5)-(3, .8); (4, .7) is worse than a cheaper point
    assert hx.tolist() == [1.0, 3.0, 5.0]
    assert hy.tolist() == [0.5, 0.8, 0.85]


def test_aiq_of_two_points_is_their_mean_quality():
    # the hull is the chord, so its mean height over the cost range is the midpoint
    assert metrics.aiq(np.array([1.0, 3.0]), np.array([0.4, 0.8]), 1.0, 3.0) == pytest.approx(0.6)
    # RouterBench's code divides the same area by the max cost
    assert metrics.aiq_maxcost(np.array([1.0, 3.0]), np.array([0.4, 0.8]), 1.0, 3.0) == pytest.approx(1.2 / 3)


def test_aiq_counts_zero_left_of_the_curve_and_flat_right_of_it():
    assert metrics.aiq(np.array([2.0]), np.array([0.5]), 1.0, 3.0) == pytest.approx(0.25)
    assert metrics.aiq(np.array([1.0]), np.array([0.5]), 1.0, 3.0) == pytest.approx(0.5)
    assert metrics.aiq(np.array([1.0, 2.0]), np.array([0.5, 0.6]), 2.0, 2.0) is None


def test_apgr_of_the_straight_line_is_one_half():
    share = np.linspace(0, 1, 11)
    assert metrics.apgr(share, 0.6 + 0.2 * share, 0.6, 0.8) == pytest.approx(0.5)
    assert metrics.cpt(share, 0.6 + 0.2 * share, 0.6, 0.8, 0.5) == pytest.approx(0.5)
    assert metrics.cpt(share, 0.6 + 0.2 * share, 0.6, 0.8, 0.8) == pytest.approx(0.8)


def test_apgr_matches_routellm_trapezoid_on_an_uneven_curve():
    share = np.array([0.0, 0.1, 0.35, 0.6, 1.0])
    q = np.array([0.6, 0.7, 0.72, 0.79, 0.8])
    auc = np.trapezoid(q, share)
    expected = (auc - 0.6) / (0.8 - 0.6)
    assert metrics.apgr(share[::-1], q[::-1], 0.6, 0.8) == pytest.approx(expected)


def test_oracle_style_curve_is_extended_flat_to_all_strong_calls():
    # reaches 0.9 with 20% strong calls and needs no more: RouteLLM's optimal curve
    share, q = np.array([0.0, 0.2]), np.array([0.6, 0.9])
    expected = (0.5 * 0.2 * 0.3 + 0.8 * 0.3) / 0.2
    assert metrics.apgr(share, q, 0.6, 0.8) == pytest.approx(expected)
    assert metrics.cpt(share, q, 0.6, 0.8, 0.5) == pytest.approx(0.2 * 0.1 / 0.3)


def test_tied_models_have_no_pgr():
    assert metrics.pgr(0.7, 0.7, 0.7) is None
    assert metrics.apgr(np.array([0.0, 1.0]), np.array([0.7, 0.7]), 0.7, 0.7) is None


# Costs on a 1e-5 grid: subnormal gaps would only test float overflow of the slopes.
points = st.lists(st.tuples(st.integers(0, 10**6).map(lambda i: i / 1e5), st.floats(0, 1, allow_nan=False)),
                  min_size=1, max_size=30)


@settings(max_examples=150, deadline=None)
@given(points)
def test_ndch_is_increasing_and_concave_and_above_every_point(pts):
    cost, quality = np.array(pts).T
    hx, hy = metrics.ndch(cost, quality)
    assert np.all(np.diff(hx) > 0) and np.all(np.diff(hy) > 0)
    slopes = np.diff(hy) / np.diff(hx)
    assert np.all(np.diff(slopes) <= 1e-9)
    for c, q in pts:
        if c >= hx[0]:
            assert np.interp(c, hx, hy) >= q - 1e-9


@settings(max_examples=100, deadline=None)
@given(points, st.floats(0, 1))
def test_adding_a_point_never_lowers_aiq(pts, q_new):
    cost, quality = np.array(pts).T
    lo, hi = 0.0, 10.0
    before = metrics.aiq(cost, quality, lo, hi)
    after = metrics.aiq(np.append(cost, 5.0), np.append(quality, q_new), lo, hi)
    assert after >= before - 1e-9
    assert 0.0 <= after <= 1.0 + 1e-9


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(-5, 5, allow_nan=False), min_size=2, max_size=50))
def test_quantile_sweep_sends_fewer_prompts_to_strong_as_the_threshold_rises(scores):
    th, ch = quantile_sweep(np.array(scores), strong=1, weak=0, num_results=10)
    share = (ch == 1).mean(axis=1)
    assert np.all(np.diff(th) >= 0)
    assert np.all(np.diff(share) <= 1e-12)
    assert share[0] == 1.0 and share[-1] == 0.0


def test_willingness_sweep_moves_from_best_to_cheapest():
    pred = np.array([[0.2, 0.9], [0.8, 0.85]])
    cost = np.array([[1.0, 10.0], [1.0, 10.0]])
    _, ch = willingness_sweep(pred, cost, np.array([0.0, 0.01, np.inf]))
    assert ch[0].tolist() == [1, 1]   # best predicted quality
    assert ch[1].tolist() == [1, 0]   # 0.05 more quality is not worth 9 USD at 0.01/USD
    assert ch[2].tolist() == [0, 0]   # cheapest


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 12), st.integers(2, 5), st.integers(0, 2**31))
def test_willingness_sweep_cost_never_rises_with_the_price_of_quality(n, m, seed):
    rng = np.random.default_rng(seed)
    pred, cost = rng.uniform(size=(n, m)), rng.uniform(0.001, 1.0, size=(n, m))
    lams = np.concatenate(([0.0], np.logspace(-3, 3, 40), [np.inf]))
    _, ch = willingness_sweep(pred, cost, lams)
    chosen = cost[np.arange(n), ch]  # (K, n) cost of each row's choice
    assert np.all(np.diff(chosen, axis=0) <= 1e-12)
