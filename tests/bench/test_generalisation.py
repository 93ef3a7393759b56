"""``python -m bench.generalisation``: its metric path against the data README's reference
figures, its grouping of near duplicates, and a tiny end-to-end run on real rows."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from bench import generalisation as gen
from bench.generalisation_parts import duplicate_groups, group_folds

DATA = Path(__file__).resolve().parents[2] / ".." / ".." / "shared" / "data"
if not DATA.is_dir():
    DATA = Path("/work/shared/data")
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason=f"shared outcome data not found at {DATA}")


@needs_data
def test_zero_router_aiq_matches_the_readme_reference() -> None:
    from router.eval.data import load_eval_data

    sets = {n: load_eval_data(DATA / gen.SETS[n][0]) for n in gen.REFERENCE_ZERO_AIQ}
    got = gen.reference_zero(sets)
    for name, ref in gen.REFERENCE_ZERO_AIQ.items():
        assert got[name] == pytest.approx(ref, abs=5e-5), name


def test_near_duplicates_share_a_group_and_a_fold() -> None:
    rng = np.random.default_rng(0)
    emb = rng.normal(size=(6, 16)).astype(np.float32)
    emb[1] = emb[0] + 0.01 * rng.normal(size=16)  # a near duplicate of row 0
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    texts = ["a b", "c", "d", " a\n b ", "e", "f"]  # row 3 is row 0's text, normalised
    groups = duplicate_groups(texts, emb)
    assert groups[0] == groups[1] == groups[3]
    assert len(set(groups[[0, 2, 4, 5]])) == 4
    for seed in range(5):
        folds = group_folds(texts, groups, 3, seed)
        assert folds[0] == folds[1] == folds[3]
        assert set(folds) <= {0, 1, 2}


def test_fold_summary_is_mean_and_sd_with_paired_differences() -> None:
    per = [{"n": 10, "zero": 0.5, "knn": 0.6, "mixroute": 0.7}, {"n": 12, "zero": 0.5, "knn": 0.4, "mixroute": 0.8}]
    s = gen.summarise_folds(per, ["zero", "knn", "mixroute"])
    assert s["rows"] == 22 and s["folds"] == 2
    assert s["mixroute"]["mean"] == pytest.approx(0.75)
    assert s["mixroute"]["sd"] == pytest.approx(np.std([0.7, 0.8], ddof=1), abs=1e-4)
    assert s["mixroute-knn"]["mean"] == pytest.approx(0.25)
    assert s["mixroute-zero"]["sd"] == pytest.approx(np.std([0.2, 0.3], ddof=1), abs=1e-4)


def test_variants_read_the_fold_memory_with_other_settings() -> None:
    from router.classify.memory import build

    v = gen.parse_variants("kappa=3; task_smoothing=0,k=40")
    assert v == {"mixroute:kappa=3": {"kappa": 3.0}, "mixroute:task_smoothing=0,k=40": {"task_smoothing": 0.0, "k": 40.0}}
    with pytest.raises(ValueError, match="unknown memory setting"):
        gen.parse_variants("alpha=1")
    rng = np.random.default_rng(0)
    emb = rng.normal(size=(50, 8))
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    mem = build(emb, rng.uniform(size=(50, 2)), ["a", "b"], k=10, groups=["g"] * 25 + ["h"] * 25, smoothing=0.5)
    other = gen.with_settings(mem, v["mixroute:task_smoothing=0,k=40"])
    assert (other.k, other.kappa, other.smoothing) == (40, mem.kappa, 0.0)
    assert (mem.k, mem.smoothing) == (10, 0.5)
    head = np.full((3, 2), 0.5)
    assert not np.allclose(other.blend(head, emb[:3]), mem.blend(head, emb[:3]))


def test_similarity_blend_is_the_memory_blend_with_a_wide_kernel() -> None:
    from bench.generalisation_parts import Signals, similarity_blend
    from router.classify.memory import build

    rng = np.random.default_rng(1)
    emb = rng.normal(size=(60, 8))
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    scores = rng.uniform(size=(60, 2))
    scores[:30, 1] = np.nan
    mem = build(emb[:50], scores[:50], ["a", "b"], k=10)
    sig = Signals(["a", "b"], rng.uniform(size=(10, 2)), np.full(10, np.nan), emb[50:])
    assert np.allclose(similarity_blend(mem, sig, 1e9), mem.blend(sig.quality, sig.emb))
    narrow = similarity_blend(mem, sig, 1e-4)  # only the nearest row counts beside the head
    assert not np.allclose(narrow, mem.blend(sig.quality, sig.emb))
    assert np.all((narrow >= 0) & (narrow <= 1))


def _head(src: Path, dst: Path, rows: int) -> None:
    csv.field_size_limit(sys.maxsize)
    dst.parent.mkdir(parents=True, exist_ok=True)
    with src.open(encoding="utf-8", newline="") as f, dst.open("w", encoding="utf-8", newline="") as g:
        reader = csv.reader(f)
        writer = csv.writer(g)
        for i, rec in enumerate(reader):
            if i > rows:
                break
            writer.writerow(rec)


@needs_data
def test_tiny_cross_validation_runs_the_projects_routers(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    data = tmp_path / "data"
    _head(DATA / "routellm/gsm8k/gsm8k_responses.csv", data / "routellm/gsm8k/gsm8k_responses.csv", 60)
    for name in ("arc_challenge_train.csv", "mbpp_train.csv", "winograde_train.csv"):
        _head(DATA / "routerbench" / name, data / "routerbench" / name, 30)
    out = tmp_path / "cv.json"
    result = gen.main([str(data), "--sets", "gsm8k,arc_challenge,mbpp,winogrande", "--folds", "2", "--rows", "all",
                       "--cache-dir", str(tmp_path / "cache"), "--json", str(out)])
    assert json.loads(out.read_text())["schemes"].keys() == {"kfold", "loso"}
    for scheme in ("kfold", "loso"):
        gsm = result["schemes"][scheme]["gsm8k"]
        assert gsm["folds"] == 2 and gsm["rows"] == 60
        # The zero router's curve is the chord between the two models: APGR 0.5 by definition.
        assert all(p["zero"] == pytest.approx(0.5) for p in gsm["per_fold"])
        for name in ("arc_challenge", "mbpp", "winogrande"):
            s = result["schemes"][scheme][name]
            assert s["rows"] == 30
            for p in s["per_fold"]:
                assert all(0.0 <= p[r] <= 1.5 for r in ("zero", "knn", "mixroute")), (scheme, name, p)
        assert result["schemes"][scheme]["gsm8k"]["mixroute"]["mean"] is not None
        # The pooled run scores every row its folds scored, each predicted out of fold.
        assert gsm["pooled"]["rows"] == 60 and gsm["pooled"]["zero"]["value"] == pytest.approx(0.5)
        assert gsm["pooled"]["mixroute"]["value"] is not None and len(gsm["pooled"]["mixroute"]["ci"]) == 2
