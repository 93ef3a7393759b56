"""Baselines reproduce the reference figures of ``../shared/data/README.md`` on its rows
(skipped when the shared data is absent)."""

from __future__ import annotations

import pytest

from router.eval import routers
from router.eval.data import load_eval_data
from router.eval.routers.base import Context
from router.eval.summary import summarise


@pytest.mark.parametrize("name, expected", [
    ("arc_challenge_train.csv", 0.9172), ("mbpp_train.csv", 0.6580), ("winograde_train.csv", 0.8004),
])
def test_zero_router_aiq_on_routerbench_train_files(data_dir, name, expected):
    data = load_eval_data(data_dir / "routerbench" / name)
    result = summarise(data, routers.get("zero").run(data, Context()), bootstrap=0)
    assert result.values["aiq"] == pytest.approx(expected, abs=5e-5)
    if name.startswith("arc"):
        assert data.n == 1019 and data.dropped == {"missing_score": 20}


def test_random_router_apgr_is_about_one_half_on_mmlu(data_dir):
    data = load_eval_data(data_dir / "routellm" / "mmlu")
    result = summarise(data, routers.get("random").run(data, Context(seed=0)), bootstrap=50)
    assert result.values["apgr"] == pytest.approx(0.5, abs=0.05)
    lo, hi = result.ci["apgr"]
    assert lo <= result.values["apgr"] <= hi


def test_oracle_beats_every_model_and_recovers_more_than_the_gap_on_gsm8k(data_dir):
    data = load_eval_data(data_dir / "routellm" / "gsm8k" / "gsm8k_responses.csv")
    assert data.dropped.get("contaminated", 0) > 0
    oracle = summarise(data, routers.get("oracle").run(data, Context()), bootstrap=0)
    zero = summarise(data, routers.get("zero").run(data, Context()), bootstrap=0)
    assert zero.values["apgr"] == pytest.approx(0.5)
    assert oracle.values["apgr"] > 1.0  # README: 1.121 on the full public set
    assert oracle.values["aiq"] > zero.values["aiq"]


def test_mixroute_router_with_the_shipped_heads(data_dir):
    """The shipped heads through the engine on 40 GSM8K prompts (skipped without torch or heads)."""
    import numpy as np

    from router.eval.errors import RouterUnavailable

    data = load_eval_data(data_dir / "routellm" / "gsm8k" / "gsm8k_responses.csv").subset(np.arange(40))
    try:
        run = routers.get("mixroute").run(data, Context())
    except RouterUnavailable as exc:
        pytest.skip(f"no usable shipped heads here: {exc}")
    assert run.extra["quality_prior_for"] == []  # the quality head knows both models
    share = (run.choices == data.strong).mean(axis=1)
    assert share[0] <= share[-1]  # a higher bar never sends fewer prompts to the strong model
    assert summarise(data, run, bootstrap=0).values["apgr"] is not None


def test_mixroute_router_decides_on_the_gateways_estimate(data_dir, monkeypatch):
    """Without ``--train`` the ``mixroute`` router reads the outcome memory shipped with the
    quality head, as the gateway does (never a row identical to the prompt); with
    ``MIXROUTE_CLASSIFIER_MEMORY=off`` it makes its local estimate from the evaluated rows."""
    import numpy as np

    from router.eval.errors import RouterUnavailable

    data = load_eval_data(data_dir / "routerbench" / "mbpp_train.csv").subset(np.arange(30))
    try:
        run = routers.get("mixroute").run(data, Context())
    except RouterUnavailable as exc:
        pytest.skip(f"no usable shipped heads here: {exc}")
    from router.classify.memory import DEFAULT_K, DEFAULT_SMOOTHING

    assert run.fit.startswith("shipped heads + outcome memory (")
    assert f"{DEFAULT_K}-NN" in run.fit and f"task_smoothing {DEFAULT_SMOOTHING:g}, exclude-exact" in run.fit
    monkeypatch.setenv("MIXROUTE_CLASSIFIER_MEMORY", "off")
    local = routers.get("mixroute").run(data, Context())
    assert "outcome memory" not in local.fit and "NN cross-fit" in local.fit
    monkeypatch.delenv("MIXROUTE_CLASSIFIER_MEMORY")
    monkeypatch.setenv("MIXROUTE_CLASSIFIER_MEMORY_SMOOTHING", "2")
    with pytest.raises(RouterUnavailable, match="MIXROUTE_CLASSIFIER_MEMORY_SMOOTHING='2'"):
        routers.get("mixroute").run(data, Context())
