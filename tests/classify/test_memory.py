"""The outcome memory: blend formula, missing scores, self-exclusion, compression round trip,
and the predictor blending the quality head with it (tiny in-file numbers, then the shipped
artifacts when present)."""

import numpy as np
import pytest

from router.classify.memory import EXACT, OutcomeMemory, build


def _unit(x):
    x = np.asarray(x, np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _memory(k=2, kappa=1.0):
    emb = _unit([[1, 0, 0], [0.9, 0.1, 0], [0, 1, 0], [0, 0.9, 0.1]])
    scores = np.array([[1, 0], [1, np.nan], [0, 1], [0, 1]], np.float32)
    return build(emb, scores, ["a", "b"], k=k, kappa=kappa), emb


def test_blend_is_the_posterior_mean_over_recorded_neighbours():
    mem, emb = _memory()
    head = np.array([[0.5, 0.5]])
    q = mem.blend(head, _unit([[1, 0.05, 0]]))
    # neighbours: rows 0 and 1; "a" recorded twice (1, 1), "b" once (0)
    assert q[0, 0] == pytest.approx((1 * 0.5 + 2) / 3)
    assert q[0, 1] == pytest.approx((1 * 0.5 + 0) / 2)
    q2 = mem.blend(head, _unit([[0, 1, 0.05]]))
    assert q2[0] == pytest.approx([(0.5 + 0) / 3, (0.5 + 2) / 3])


def test_kappa_zero_is_knn_and_no_neighbour_keeps_the_head():
    mem, _ = _memory(kappa=0.0)
    assert mem.blend(np.array([[0.3, 0.3]]), _unit([[1, 0.05, 0]]))[0, 0] == pytest.approx(1.0)
    lone = build(_unit([[1, 0, 0]]), np.array([[1, np.nan]], np.float32), ["a", "b"], k=1, kappa=2.0)
    assert lone.blend(np.array([[0.2, 0.7]]), _unit([[1, 0, 0]]))[0, 1] == pytest.approx(0.7)


def test_exclude_exact_drops_the_prompt_itself_and_keeps_k():
    mem, emb = _memory(k=2)
    idx, valid = mem.neighbours(emb[:1], exclude_exact=True)
    kept = set(idx[0][valid[0]].tolist())
    assert 0 not in kept and len(kept) == 2
    assert mem.blend(np.array([[0.5, 0.5]]), emb[:1], exclude_exact=True)[0, 0] == pytest.approx((0.5 + 1 + 0) / 3)
    idx, valid = mem.neighbours(emb[:1])
    assert 0 in idx[0][valid[0]]
    assert EXACT < 1.0


def test_save_load_round_trip_with_projection(tmp_path):
    pytest.importorskip("safetensors")
    rng = np.random.default_rng(0)
    emb = _unit(rng.normal(size=(200, 32)))
    scores = rng.integers(0, 2, size=(200, 3)).astype(np.float32)
    scores[::7, 1] = np.nan
    mem = build(emb, scores, ["x", "y", "z"], dims=16, k=5, kappa=3.0, meta={"rows": 200})
    mem.save(tmp_path / "m.safetensors")
    back = OutcomeMemory.load(tmp_path / "m.safetensors")
    assert (back.k, back.kappa, back.labels, back.meta) == (5, 3.0, ["x", "y", "z"], {"rows": 200})
    assert np.array_equal(np.isnan(back.scores), np.isnan(scores))
    assert np.allclose(np.nan_to_num(back.scores), np.nan_to_num(scores), atol=1 / 255)
    assert np.abs(back.vectors - mem.vectors).max() < 0.02  # int8 codes, one scale per row
    assert np.allclose(back.basis, mem.basis, atol=1e-3)
    q = emb[:20] + 0.01 * rng.normal(size=(20, 32))  # near stored rows: the same nearest neighbour
    assert np.array_equal(back.neighbours(q)[0][:, 0], mem.neighbours(q)[0][:, 0])


def test_bad_shapes_are_refused(tmp_path):
    with pytest.raises(ValueError):
        build(np.ones((2, 3)), np.ones((3, 2)), ["a", "b"])
    with pytest.raises(ValueError):
        build(_unit([[1, 0]]), np.array([[np.nan]]), ["a"])
    mem, _ = _memory()
    with pytest.raises(ValueError):
        mem.blend(np.ones((1, 3)), _unit([[1, 0, 0]]))
    from router.classify.errors import AdapterError

    (tmp_path / "bad.safetensors").write_bytes(b"not a file")
    with pytest.raises(AdapterError):
        OutcomeMemory.load(tmp_path / "bad.safetensors")


def test_shipped_predictor_blends_the_memory():
    """With the shipped artifacts: the gateway's predictor reports quality = the memory's blend
    of the head (checked against the head alone plus :meth:`OutcomeMemory.blend`)."""
    pytest.importorskip("torch")
    from router.classify import default_adapters_dir, load_predictor
    from router.classify.memory import MEMORY_FILE

    if not (default_adapters_dir() / "quality" / MEMORY_FILE).is_file():
        pytest.skip("no shipped outcome memory (mixroute train --heads memory)")
    texts = ["What is the derivative of x**3 + 2x?", "Write a Python function that reverses a list."]
    with_mem = load_predictor(heads=["quality"], scan_chars=0)
    alone = load_predictor(heads=["quality"], scan_chars=0, memory=False)
    try:
        got = with_mem.classify_batch(texts)
        head = alone.classify_batch(texts)
        labels = with_mem.memory.labels
        _, _, emb = with_mem.encoder.scan_embed(texts)
        want = with_mem.memory.blend(np.array([[h["quality"][lab] for lab in labels] for h in head]), emb.numpy())
        assert np.allclose([[g["quality"][lab] for lab in labels] for g in got], want, atol=1e-4)
        assert got[0]["quality_memory"] == with_mem.memory.n > 1000
        assert any(abs(g["quality"][lab] - h["quality"][lab]) > 1e-3 for g, h in zip(got, head) for lab in labels)
        mem = with_mem.memory
        counts = [g["quality_n"][lab] for g in got for lab in labels]  # kappa + neighbours with that model's score
        assert all(mem.kappa <= c <= mem.kappa + mem.k for c in counts) and max(counts) > mem.kappa
        # The gateway's Prediction carries the Beta posterior sd of each blended quality.
        import asyncio

        from backends.config import BackendConfig

        b = BackendConfig(name="b", kind="fake", model=labels[0])
        pred = asyncio.run(with_mem.predict(texts[0], [b]))
        q, n = pred.quality["b"], got[0]["quality_n"][labels[0]]
        assert pred.quality_sd["b"] == pytest.approx((q * (1 - q) / (n + 1)) ** 0.5, abs=1e-4) and pred.quality_sd["b"] > 0
        assert "quality_n" not in pred.signals
        assert asyncio.run(alone.predict(texts[0], [b])).quality_sd == {}  # no memory: no sd
    finally:
        with_mem.close()
        alone.close()


def test_build_from_data_keeps_train_split_rows_with_known_models(tmp_path):
    """`mixroute train --heads memory` path: train-split rows only, scores mapped onto the
    quality head's labels the way the gateway matches backends, unknown models dropped."""
    import csv

    from router.classify.data import split_of
    from router.classify.heads import HeadConfig, LoraPlacement
    from router.classify.memory import build_from_data
    from router.eval.embed import HashingEmbedder

    (tmp_path / "adapters" / "quality").mkdir(parents=True)
    cfg = HeadConfig(name="quality", kind="multilabel", labels=["org/small", "large"], base_model="tiny",
                     max_tokens=24, head_tokens=6, lora=LoraPlacement(layers=[0], modules=["output.dense"], r=2, alpha=4))
    (tmp_path / "adapters" / "quality" / "config.json").write_text(cfg.model_dump_json())
    (tmp_path / "data" / "routerbench").mkdir(parents=True)
    prompts = [f"question number {i} about rivers" for i in range(200)]
    with (tmp_path / "data" / "routerbench" / "t.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["sample_id", "prompt", "eval_name", "Small", "large", "other",
                    "Small|total_cost", "large|total_cost", "other|total_cost"])
        for i, p in enumerate(prompts):
            w.writerow([i, repr([p]), "tiny", i % 2, 1, 0, 0.001, 0.01, 0.002])
    mem = build_from_data(tmp_path / "data", tmp_path / "adapters", embedder=HashingEmbedder(64), dims=8, k=5)
    train = [p for p in prompts if split_of(p) == "train"]
    assert mem.n == len(train) == mem.meta["rows"] and 0 < mem.n < len(prompts)
    assert mem.labels == ["org/small", "large"] and mem.vectors.shape == (mem.n, 8)
    assert set(np.unique(mem.scores[:, 0])) == {0.0, 1.0} and (mem.scores[:, 1] == 1.0).all()
    assert mem.meta["sources"] == {"routerbench": mem.n}
    from router.classify.memory import DEFAULT_SMOOTHING

    assert len(mem.group_names) == 1 and mem.group_names[0].startswith("routerbench/")
    assert mem.smoothing == DEFAULT_SMOOTHING and (mem.groups == 0).all()
    assert build_from_data(tmp_path / "data", tmp_path / "adapters", embedder=HashingEmbedder(64),
                           smoothing=0.0).smoothing == 0.0
    with pytest.raises(FileNotFoundError):
        build_from_data(tmp_path / "data", tmp_path / "nowhere", embedder=HashingEmbedder(64))


@pytest.mark.parametrize("setting", ["off", "on"])
def test_calibrate_follows_the_memory_setting(monkeypatch, setting):
    """``mixroute calibrate`` decides with the estimator the gateway will use: the head alone
    under ``MIXROUTE_CLASSIFIER_MEMORY=off``, else the memory blend (never a row's own neighbour)."""
    pytest.importorskip("torch")
    from gateway.commands.calibrate import _load_heads
    from router.classify import default_adapters_dir
    from router.classify.memory import MEMORY_FILE

    if not (default_adapters_dir() / "quality" / MEMORY_FILE).is_file():
        pytest.skip("no shipped outcome memory (mixroute train --heads memory)")
    monkeypatch.setenv("MIXROUTE_CLASSIFIER_MEMORY", setting)
    heads = _load_heads(None)
    try:
        assert (heads.memory is None) == (setting == "off")
        assert heads.exclude_exact
    finally:
        heads.close()


def test_task_smoothing_reads_group_means_and_survives_save_load(tmp_path):
    """With ``task_smoothing`` 1 a neighbour contributes its group's mean score, not its own
    0 or 1; the groups, their names and the setting come back from the file."""
    pytest.importorskip("safetensors")
    from router.neighbours import MIN_GROUP_ROWS

    n = 2 * MIN_GROUP_ROWS
    rng = np.random.default_rng(1)
    emb = _unit(np.column_stack([np.r_[np.ones(n), np.zeros(n)], np.r_[np.zeros(n), np.ones(n)],
                                 rng.normal(scale=0.01, size=2 * n)]))
    a = np.r_[np.tile([1.0, 0.0, 0.0, 0.0], n // 4), np.ones(n)]  # task x: a right 1 in 4; task y: always
    scores = np.column_stack([a, np.ones(2 * n)]).astype(np.float32)
    groups = ["src/x"] * n + ["src/y"] * n
    mem = build(emb, scores, ["a", "b"], k=1, kappa=0.0, groups=groups, smoothing=1.0)
    q = mem.blend(np.array([[0.5, 0.5]]), emb[:1])
    assert q[0, 0] == pytest.approx(0.25, abs=1e-6)  # the nearest row's own score is 0 or 1
    raw = build(emb, scores, ["a", "b"], k=1, kappa=0.0, groups=groups, smoothing=0.0)
    assert raw.blend(np.array([[0.5, 0.5]]), emb[:1])[0, 0] in (0.0, 1.0)
    mem.save(tmp_path / "m.safetensors")
    back = OutcomeMemory.load(tmp_path / "m.safetensors")
    assert back.group_names == ["src/x", "src/y"] and back.smoothing == 1.0
    np.testing.assert_array_equal(back.groups, np.r_[np.zeros(n, int), np.ones(n, int)])
    assert back.blend(np.array([[0.5, 0.5]]), emb[:1])[0, 0] == pytest.approx(0.25, abs=3e-3)  # uint8 scores
    with pytest.raises(ValueError, match="group names"):
        build(emb, scores, ["a", "b"], groups=groups[:-1])


def test_task_groups_fall_back_to_the_task_family_for_small_tasks():
    from router.classify.data import Row
    from router.classify.memory import MIN_TASK_ROWS, task_groups

    rows = ([Row(f"p{i}", "routellm", "mmlu:anatomy", {}) for i in range(MIN_TASK_ROWS)]
            + [Row("q", "routellm", "mmlu:law", {}), Row("r", "routerbench", "mmlu:law", {})])
    assert task_groups(rows) == (["routellm/mmlu:anatomy"] * MIN_TASK_ROWS + ["routellm/mmlu", "routerbench/mmlu"])


def test_with_smoothing_overrides_the_files_setting_and_refuses_a_memory_without_groups():
    from router.classify.errors import AdapterError

    mem, emb = _memory()
    with pytest.raises(AdapterError, match="no task groups"):
        mem.with_smoothing(0.5)
    assert mem.with_smoothing(0.0).smoothing == 0.0  # nothing to smooth: fine without groups
    grouped = build(emb, mem.scores, ["a", "b"], groups=["x"] * 4, smoothing=0.0)
    half = grouped.with_smoothing(0.5)
    assert (half.smoothing, grouped.smoothing) == (0.5, 0.0)  # a copy; the original is unchanged
    with pytest.raises(AdapterError, match=r"not in \[0, 1\]"):
        grouped.with_smoothing(1.5)


def test_the_shipped_memory_keeps_task_groups_and_the_smoothing_setting_reaches_calibrate(monkeypatch):
    """The shipped memory carries each row's source/task group (so
    ``MIXROUTE_CLASSIFIER_MEMORY_SMOOTHING`` works without a rebuild), and ``mixroute
    calibrate`` reads that setting as the gateway does; a bad value is refused by name."""
    pytest.importorskip("torch")
    from gateway.commands.calibrate import _load_heads
    from router.classify import default_adapters_dir
    from router.classify.memory import MEMORY_FILE

    path = default_adapters_dir() / "quality" / MEMORY_FILE
    if not path.is_file():
        pytest.skip("no shipped outcome memory (mixroute train --heads memory)")
    shipped = OutcomeMemory.load(path)
    assert shipped.groups is not None and "routerbench/winogrande" in shipped.group_names
    assert all(name.split("/", 1)[0] in shipped.meta["sources"] for name in shipped.group_names)
    monkeypatch.setenv("MIXROUTE_CLASSIFIER_MEMORY_SMOOTHING", "0.5")
    heads = _load_heads(None)
    try:
        assert heads.memory.smoothing == 0.5
    finally:
        heads.close()
    monkeypatch.setenv("MIXROUTE_CLASSIFIER_MEMORY_SMOOTHING", "half")
    with pytest.raises(ValueError, match="MIXROUTE_CLASSIFIER_MEMORY_SMOOTHING='half'"):
        _load_heads(None)


def test_mixroute_train_writes_the_memory_smoothing_asked_for(tmp_path, data_dir):
    """``mixroute train --heads memory --memory-smoothing A``: the file keeps A and its rows'
    groups; a value outside [0, 1] is refused before anything is built."""
    pytest.importorskip("torch")
    import csv
    import shutil
    import subprocess

    from router.classify import default_adapters_dir
    from tests.replay.test_command import ROOT, _mixroute

    (tmp_path / "out" / "quality").mkdir(parents=True)
    shutil.copy(default_adapters_dir() / "quality" / "config.json", tmp_path / "out" / "quality" / "config.json")
    (tmp_path / "data" / "routerbench").mkdir(parents=True)
    with (data_dir / "routerbench" / "mbpp_train.csv").open(newline="") as src, \
            (tmp_path / "data" / "routerbench" / "mbpp_train.csv").open("w", newline="") as dst:
        writer = csv.writer(dst)
        for i, row in enumerate(csv.reader(src)):
            if i > 40:
                break
            writer.writerow(row)
    args = [*_mixroute(), "train", "--heads", "memory", "--data", str(tmp_path / "data"), "--out", str(tmp_path / "out")]
    proc = subprocess.run([*args, "--memory-smoothing", "0.25"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 task groups, task_smoothing 0.25" in proc.stdout
    mem = OutcomeMemory.load(tmp_path / "out" / "quality" / "memory.safetensors")
    assert mem.smoothing == 0.25 and mem.group_names == ["routerbench/mbpp"]
    bad = subprocess.run([*args, "--memory-smoothing", "1.5"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "--memory-smoothing" in bad.stderr


@pytest.mark.parametrize("args, message", [
    (["--heads", "nosuch,memory"], "error: unknown head(s) ['nosuch']; known: ["),
    (["--heads", "quality", "--memory-smoothing", "0.3"], "but --heads does not name memory"),
])
def test_mixroute_train_refuses_before_any_work(tmp_path, args, message):
    """From a fresh-user pass: the unknown-head message left out ``memory``, and
    ``--memory-smoothing`` without the memory head was ignored silently."""
    pytest.importorskip("torch")
    from typer.testing import CliRunner

    from gateway.cli import app

    res = CliRunner().invoke(app, ["train", *args, "--out", str(tmp_path / "out"), "--data", str(tmp_path)])
    assert res.exit_code == 2, res.output
    assert message in res.stderr and "Traceback" not in res.output
    if "unknown" in message:
        assert "'memory']" in res.stderr
    assert not (tmp_path / "out").exists()
