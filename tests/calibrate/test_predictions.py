"""Head outputs computed once in batches, cached on disk, served through the heads' own ``predict``."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from router.calibration import calibrate, load_rows
from router.calibration.predictions import BATCH, Replayed, cache_path, precompute
from router.policy import load_policy
from router.predict import Prediction
from tests.calibrate.conftest import MODELS, TopicPredictor
from tests.calibrate.test_calibrate import GRIDS


class FakeHeads:
    """The parts of ``ClassifierPredictor`` calibration uses; ``predict`` reads ``self.signals``."""

    heads = {"quality": SimpleNamespace(version="1")}

    def __init__(self):
        self.batches: list[int] = []
        self.topic = TopicPredictor()

    def classify_batch(self, texts):
        self.batches.append(len(texts))
        return [{"text": t} for t in texts]

    async def signals(self, text):
        raise AssertionError("the micro-batcher must not be used during calibration")

    async def predict(self, text, backends):
        out = await self.signals(text)
        return Prediction(quality=(await self.topic.predict(out["text"], backends)).quality, source="classifier")


def test_outputs_are_batched_cached_and_reused(tmp_path):
    texts = [f"a easy question number {i}" for i in range(150)] * 2  # duplicates classified once
    heads = FakeHeads()
    cache = cache_path(heads)
    assert str(tmp_path / "cache") in str(cache)
    out = precompute(heads, texts, cache=cache)
    assert len(out) == 150 and heads.batches == [BATCH, BATCH, 150 - 2 * BATCH]
    again = FakeHeads()
    assert precompute(again, texts + ["a hard question number 999"], cache=cache) == {
        **out, "a hard question number 999": {"text": "a hard question number 999"}}
    assert again.batches == [1]


def test_replayed_serves_the_table_and_classifies_a_miss():
    heads = FakeHeads()
    served = Replayed(heads, {"a easy question number 1": {"text": "a easy question number 1"}})
    backends = [SimpleNamespace(name=m, model=m) for m in MODELS]
    p = asyncio.run(served.predict("a easy question number 1", backends))
    assert p.source == "classifier" and p.quality["small"] > 0.8 and heads.batches == []
    asyncio.run(served.predict("a hard question number 2", backends))
    assert heads.batches == [1]


def test_calibrate_runs_heads_once_per_prompt(policy_file, nested_csv):
    heads = FakeHeads()
    rows = load_rows([nested_csv])
    res = calibrate(load_policy(policy_file), "auto", rows, heads, target=0.9, resamples=200, grids=GRIDS)
    assert sum(heads.batches) == rows.n and res.chosen.lower >= 0.9


def test_cache_file_follows_the_outcome_memory(tmp_path):
    """Outputs blended with one memory are never served for another memory, another
    ``k``/``kappa`` or another ``exclude_exact`` (a rebuilt memory keeps the heads' versions)."""
    import numpy as np

    from router.classify.memory import build

    plain = FakeHeads()
    mem = build(np.eye(3, dtype=np.float32), np.full((3, 1), 0.5, np.float32), ["m"], k=2, groups=["g"] * 3,
                smoothing=0.0)
    mem.save(tmp_path / "memory.safetensors")
    from router.classify.memory import OutcomeMemory

    loaded = OutcomeMemory.load(tmp_path / "memory.safetensors")
    assert len(loaded.digest) == 16
    with_memory = FakeHeads()
    with_memory.memory, with_memory.exclude_exact = loaded, True
    paths = {cache_path(plain), cache_path(with_memory)}
    with_memory.exclude_exact = False
    paths.add(cache_path(with_memory))
    loaded.k = 3
    paths.add(cache_path(with_memory))
    loaded.smoothing = 0.5  # MIXROUTE_CLASSIFIER_MEMORY_SMOOTHING
    paths.add(cache_path(with_memory))
    loaded.smoothing = 0.0
    mem.scores[0, 0] = 1.0  # rebuilt: another file, another digest
    mem.save(tmp_path / "memory.safetensors")
    with_memory.memory = OutcomeMemory.load(tmp_path / "memory.safetensors")
    paths.add(cache_path(with_memory))
    assert len(paths) == 6
    assert cache_path(with_memory) == cache_path(with_memory)
