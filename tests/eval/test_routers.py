"""Every router on small synthetic data, and ``mixroute`` through the real decision engine."""

from __future__ import annotations

import json

import numpy as np
import pytest

from router.eval import routers
from router.eval.data import load_eval_data
from router.eval.embed import CachedEmbedder, HashingEmbedder
from router.eval.routers import EvalRouter, register
from router.eval.routers.base import Context
from router.eval.summary import summarise


def _ctx(**kw) -> Context:
    emb = HashingEmbedder(256)
    return Context(embed=lambda texts: emb(texts), **kw)


@pytest.mark.parametrize("name", ["random", "cheapest", "strongest", "zero", "oracle", "knn", "mlp", "mf"])
def test_router_gives_valid_choices_and_metrics(tiny_csv, name):
    data = load_eval_data(tiny_csv)
    run = routers.get(name).run(data, _ctx())
    assert run.choices.shape[1] == data.n and run.choices.shape[0] == len(run.thresholds)
    assert run.choices.min() >= 0 and run.choices.max() < len(data.models)
    result = summarise(data, run, bootstrap=20)
    assert 0.0 <= result.values["quality"] <= 1.0
    assert result.values["apgr"] is None  # three models: no RouteLLM metrics
    row = result.row()
    assert {"dataset", "router", "aiq", "apgr", "cpt50", "cpt80", "quality", "cost"} <= set(row)


@pytest.mark.parametrize("name", ["knn", "mlp", "mf"])
def test_learned_routers_read_the_prompt(tiny_pair_csv, name):
    """On two-model data where the topic decides, a learned router beats random."""
    data = load_eval_data(tiny_pair_csv)
    learned = summarise(data, routers.get(name).run(data, _ctx()), bootstrap=0)
    rand = summarise(data, routers.get("random").run(data, _ctx()), bootstrap=0)
    assert learned.fit == "cross-fit 5 folds"
    assert learned.values["apgr"] > rand.values["apgr"] + 0.1
    assert learned.values["aiq"] > summarise(data, routers.get("zero").run(data, _ctx()), bootstrap=0).values["aiq"]


def test_learned_router_fits_on_train_rows(tmp_path):
    from tests.eval.conftest import write_tiny

    train = load_eval_data(write_tiny(tmp_path / "train.csv", n=120, seed=1))
    test = load_eval_data(write_tiny(tmp_path / "test.csv", n=60, seed=2))
    run = routers.get("knn").run(test, _ctx(train=train))
    assert run.fit == "train (120 rows)"


def test_registry_rejects_bad_and_duplicate_names():
    class NoName(EvalRouter):
        pass

    class Clash(EvalRouter):
        name = "zero"

    with pytest.raises(ValueError):
        register(NoName)
    with pytest.raises(ValueError, match="taken"):
        register(Clash)
    with pytest.raises(KeyError, match=r"known: cheapest, .*random"):
        routers.get("nope")


def test_embedding_cache_embeds_each_text_once(tmp_path):
    calls = []

    class Counting(HashingEmbedder):
        def __call__(self, texts, progress=None):
            calls.append(list(texts))
            return super().__call__(texts, progress)

    first = CachedEmbedder(Counting(64), tmp_path)
    a = first(["x y", "z"])
    second = CachedEmbedder(Counting(64), tmp_path)  # a new process: reads the shards
    b = second(["z", "x y", "new"])
    assert calls == [["x y", "z"], ["new"]] or sorted(map(sorted, calls)) == [["new"], ["x y", "z"]]
    np.testing.assert_allclose(b[1], a[0], atol=1e-3)


class FakeHeads:
    """Stands in for ``ClassifierPredictor``: its quality head thinks ``large`` is needed
    for proofs, ``medium`` for poems, anything for greetings."""

    good = {"greeting": {"small", "medium", "large"}, "poem": {"medium", "large"}, "proof": {"large"}}

    def classify_batch(self, texts):
        out = []
        for t in texts:
            topic = next(k for k in self.good if k in t)
            out.append({"quality": {m: (0.9 if m in self.good[topic] else 0.2) for m in ("small", "medium", "large")}})
        return out

    def head_model(self, backend):
        return backend.model if backend.model in ("small", "medium", "large") else None


def test_mixroute_router_decides_with_the_engine(tiny_csv):
    data = load_eval_data(tiny_csv)
    run = routers.get("mixroute").run(data, Context(options={"predictor": FakeHeads()}))
    assert run.knob == "quality_bar.willingness_to_pay"  # three models: the cost-quality trade-off
    assert np.all(np.diff(run.thresholds) > 0)
    strict, lax = len(run.thresholds) - 1, 0
    topics = np.array([next(k for k in FakeHeads.good if k in p) for p in data.prompts])
    small, large = data.models.index("small"), data.models.index("large")
    # paying (almost) anything for quality: the cheapest model with the best predicted quality
    assert set(run.choices[strict][topics == "greeting"]) == {small}
    assert set(run.choices[strict][topics == "proof"]) == {large}
    # paying (almost) nothing: the cheapest
    assert set(run.choices[lax]) == {small}
    result = summarise(data, run, bootstrap=0)
    json.dumps(result.row())  # JSON-ready, numpy scalars included
    assert result.values["quality"] > 0.9


def test_mixroute_router_sweeps_the_relative_bar_on_two_models(tiny_csv):
    data = load_eval_data(tiny_csv).restrict_models(["small", "large"])
    run = routers.get("mixroute").run(data, Context(options={"predictor": FakeHeads()}))
    assert run.knob == "quality_bar.target" and run.thresholds[-1] == 1.0
    assert all(c["met"] for c in run.extra["compliance"] if c["target"] <= 0.9)


def test_mixroute_router_without_heads_is_reported_not_raised(tiny_csv, tmp_path):
    from router.eval.runner import EvalConfig, evaluate

    (tmp_path / "heads").mkdir()
    reports = evaluate([tiny_csv], config=EvalConfig(routers=["zero", "mixroute"], bootstrap=0,
                                                     options={"adapters": tmp_path / "heads"}))
    mix = reports[0].results[1]
    assert mix.values["aiq"] is None and mix.note


class RandomHeads(FakeHeads):
    """Random quality predictions per prompt (seeded by the prompt)."""

    def classify_batch(self, texts):
        out = []
        for t in texts:
            rng = np.random.default_rng(abs(hash(t)) % 2**32)
            out.append({"quality": dict(zip(("small", "medium", "large"), rng.uniform(size=3).tolist()))})
        return out


def test_mixroute_cost_never_falls_as_the_bar_rises(tiny_csv):
    data = load_eval_data(tiny_csv)
    run = routers.get("mixroute").run(data, Context(options={"predictor": RandomHeads()}))
    chosen = data.costs[np.arange(data.n), run.choices]  # (targets, n)
    assert np.all(np.diff(run.thresholds) > 0)
    assert np.all(np.diff(chosen, axis=0) >= -1e-12)


class WrongHeads(FakeHeads):
    """A quality head that is wrong about proofs: it thinks ``small`` handles them."""

    good = {"greeting": {"small", "medium", "large"}, "poem": {"medium", "large"}, "proof": {"small", "large"}}


def test_mixroute_local_estimate_corrects_the_head_from_neighbours(tiny_csv):
    from router.eval.embed import HashingEmbedder

    data = load_eval_data(tiny_csv)
    topics = np.array([next(k for k in FakeHeads.good if k in p) for p in data.prompts])
    small, large = data.models.index("small"), data.models.index("large")
    heads_only = routers.get("mixroute").run(data, Context(options={"predictor": WrongHeads(), "neighbours": 0}))
    strict = len(heads_only.thresholds) - 1  # the highest willingness to pay: the best predicted quality
    assert set(heads_only.choices[strict][topics == "proof"]) == {small}  # the head alone is fooled
    run = routers.get("mixroute").run(data, Context(embed=HashingEmbedder(256), options={"predictor": WrongHeads()}))
    strict = len(run.thresholds) - 1
    # the recorded scores of the other folds' proofs outweigh the head (cross-fit: no row sees itself)
    assert set(run.choices[strict][topics == "proof"]) == {large}
    assert "NN cross-fit" in run.fit
    assert summarise(data, run, bootstrap=0).values["aiq"] > summarise(data, heads_only, bootstrap=0).values["aiq"]
