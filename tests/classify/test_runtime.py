"""Shared trunk + stacked LoRA heads, on a tiny in-file BERT (CPU, random weights)."""

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("peft")

from router.classify.heads import HeadConfig, LoraPlacement, load_head  # noqa: E402
from router.classify.layers import LINEARS  # noqa: E402
from router.classify.errors import AdapterError  # noqa: E402
from router.classify.runtime import BaseEncoder, MultiHeadEncoder  # noqa: E402
from router.classify.heads import save_head  # noqa: E402
from router.classify.train import TrainConfig  # noqa: E402
from router.classify.trainable import Trainable  # noqa: E402

N_LAYERS, HIDDEN = 3, 16
TEXTS = ["hello world", "a", "", "a much longer prompt that will be cut at both ends " * 3]


class CharTokenizer:
    """One id per non-space character; 0 pad, 1 [CLS], 2 [SEP]."""

    cls_token_id, sep_token_id = 1, 2

    def __call__(self, texts, add_special_tokens=False):
        return {"input_ids": [[3 + ord(c) % 40 for c in t if not c.isspace()] for t in texts]}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> tuple[Path, BaseEncoder, object]:
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=50, hidden_size=HIDDEN, num_hidden_layers=N_LAYERS, num_attention_heads=2,
                                  intermediate_size=32, max_position_embeddings=64)
    model = transformers.BertModel(cfg, add_pooling_layer=False).eval()
    folder = tmp_path_factory.mktemp("tiny-bert")
    model.save_pretrained(folder)
    base = BaseEncoder.from_state(model.state_dict(), CharTokenizer(), n_layers=N_LAYERS, n_attn_heads=2,
                                  max_tokens=24, head_tokens=6, name="tiny")
    return folder, base, model


def _head(tmp: Path, folder: Path, base: BaseEncoder, name: str, modules: list[str], seed: int, layers=(2,),
          pooling: str = "mean"):
    """Train nothing: random LoRA A and B through peft, saved and re-loaded as a shipped head."""
    cfg = TrainConfig(data=tmp, out=tmp, base_path=folder, layers=list(layers), modules=modules, r=4, alpha=8,
                      max_tokens=24, head_tokens=6, base_name="tiny")
    torch.manual_seed(seed)
    model = Trainable(cfg, base, n_out=3, pooling=pooling)
    for n, p in model.named_parameters():
        if "lora_B" in n:
            torch.nn.init.normal_(p, std=0.5)
    model.eval()
    config = HeadConfig(name=name, kind="multilabel", labels=["a", "b", "c"], base_model="tiny", max_tokens=24,
                        head_tokens=6, lora=LoraPlacement(layers=list(layers), modules=modules, r=4, alpha=8),
                        pooling=pooling)
    save_head(tmp / name, config, model)
    return model, load_head(tmp / name)


def test_trunk_matches_transformers(tiny):
    _, base, model = tiny
    ids, mask = base.tokenize(TEXTS)
    with torch.no_grad():
        ref = model(input_ids=ids, attention_mask=mask).last_hidden_state
    mine = base.trunk(ids, mask, N_LAYERS)
    assert torch.allclose(ref[mask.bool()], mine[mask.bool()], atol=1e-5)


@pytest.mark.parametrize("pooling", ["mean", "max"])
@pytest.mark.parametrize("modules", [["output.dense"], list(LINEARS)])
def test_serving_equals_peft_training_forward(tiny, tmp_path, modules, pooling):
    folder, base, _ = tiny
    model, head = _head(tmp_path, folder, base, "h", modules, seed=1, pooling=pooling)
    ids, mask = base.tokenize(TEXTS)
    x = base.trunk(ids, mask, 2)
    with torch.no_grad():
        ref = model(x, mask)
        pre = model.prefix(x, mask)
        if pre is not None:  # the shared-prefix training path gives the same answer
            assert torch.allclose(model(x, mask, pre), ref, atol=1e-5)
    (out,) = MultiHeadEncoder(base, [head], dtype="float32", linear="default").run(TEXTS)
    assert torch.allclose(out, ref, atol=1e-4)


class CountingWeights(dict):
    """Counts how often a layer's query map is read, i.e. how often the layer runs."""

    calls = 0

    def __getitem__(self, key):
        if key == "attention.self.query":
            CountingWeights.calls += 1
        return super().__getitem__(key)


def test_heads_share_the_trunk(tiny, tmp_path):
    folder, base, _ = tiny
    heads = [_head(tmp_path, folder, base, f"h{i}", ["output.dense"] if i % 2 else ["attention.self.value"], seed=i)[1]
             for i in range(4)]
    singles = [MultiHeadEncoder(base, [h], dtype="float32").run(TEXTS)[0] for h in heads]
    enc = MultiHeadEncoder(base, heads, dtype="float32", prompt_threads=0)  # one batched pass
    assert enc.split == 2
    for lw in base.layers[:2]:
        lw.w = CountingWeights(lw.w)
    try:
        CountingWeights.calls = 0
        together = enc.run(TEXTS)
        assert CountingWeights.calls == 2  # each lower layer once for 4 heads, not 4 times
        assert enc.trunk_calls == 1
    finally:
        for lw in base.layers[:2]:
            lw.w = dict(lw.w)
    for a, b in zip(together, singles):
        assert torch.allclose(a, b, atol=1e-5)  # stacking heads changes nothing per head


def test_heads_at_different_depths_stack(tiny, tmp_path):
    folder, base, _ = tiny
    low = _head(tmp_path, folder, base, "low", ["attention.self.query"], seed=5, layers=(1, 2))[1]
    top = _head(tmp_path, folder, base, "top", ["output.dense"], seed=6)[1]
    enc = MultiHeadEncoder(base, [low, top], dtype="float32")
    assert enc.split == 1
    out = enc.run(TEXTS)
    assert torch.allclose(out[1], MultiHeadEncoder(base, [top], dtype="float32").run(TEXTS)[0], atol=1e-5)


def test_broken_adapter_folder_is_reported(tmp_path):
    from router.classify.errors import AdapterError

    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(AdapterError, match="missing"):
        load_head(tmp_path)


def test_bfloat16_runtime_stays_close(tiny, tmp_path):
    folder, base, _ = tiny
    head = _head(tmp_path, folder, base, "h", ["output.dense"], seed=3)[1]
    ref = MultiHeadEncoder(base, [head], dtype="float32").run(TEXTS)[0]
    import copy

    out = MultiHeadEncoder(copy.deepcopy(base), [head], dtype="bfloat16").run(TEXTS)[0]
    assert out.dtype == torch.float32
    assert torch.allclose(out, ref, atol=0.1)


def test_auto_dtype_follows_the_cpu(monkeypatch):
    from router.classify import precision
    from router.classify.errors import AdapterError

    assert precision.resolve_dtype("float32", "cpu") == "float32"
    assert precision.resolve_dtype("bfloat16", "cpu") == "bfloat16"
    flags = {"avx512_bf16"}
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset(flags))
    assert precision.cpu_has_bf16() and precision.resolve_dtype("auto", "cpu") == "float32"  # AVX-512 BF16 alone: slower
    flags.add("amx_bf16")
    assert precision.resolve_dtype("auto", "cpu") == "bfloat16"
    flags.clear()
    assert precision.resolve_dtype("auto", "cpu") == "float32"
    with pytest.raises(AdapterError, match="auto, float32 or bfloat16"):
        precision.resolve_dtype("int4", "cpu")


def test_auto_linear_follows_the_cpu(monkeypatch):
    """``linear=auto``: int8 for float32 on a CPU with VNNI, else oneDNN float32; never int8
    for bfloat16 or on a GPU; an explicit choice that cannot run is an error, not a fallback."""
    from router.classify import precision
    from router.classify.errors import AdapterError

    monkeypatch.setattr(precision, "int8_linear_available", lambda: True)
    monkeypatch.setattr(precision, "onednn_linear_available", lambda: True)
    monkeypatch.setattr(precision, "onednn_bf16_available", lambda: True)
    monkeypatch.setattr(precision, "cpu_has_vnni", lambda: True)
    assert precision.resolve_linear("auto", "cpu", "float32") == "int8"
    assert precision.resolve_linear("auto", "cpu", "bfloat16") == "onednn"  # prepacked bfloat16, fused
    assert precision.resolve_linear("onednn", "cpu", "bfloat16") == "onednn"
    monkeypatch.setattr(precision, "onednn_bf16_available", lambda: False)  # an AVX2-only CPU
    assert precision.resolve_linear("auto", "cpu", "bfloat16") == "default"
    assert precision.resolve_linear("auto", "cpu", "float32") == "int8"
    with pytest.raises(AdapterError, match="oneDNN runs bfloat16"):
        precision.resolve_linear("onednn", "cpu", "bfloat16")
    monkeypatch.setattr(precision, "onednn_bf16_available", lambda: True)
    with pytest.raises(AdapterError, match="needs the CPU"):
        precision.resolve_linear("onednn", "cuda", "float32")
    assert precision.resolve_linear("auto", "cuda", "float32") == "default"
    assert precision.resolve_linear("onednn", "cpu", "float32") == "onednn"
    assert precision.resolve_linear("default", "cpu", "float32") == "default"
    monkeypatch.setattr(precision, "cpu_has_vnni", lambda: False)
    assert precision.resolve_linear("auto", "cpu", "float32") == "onednn"
    assert precision.resolve_linear("int8", "cpu", "float32") == "int8"  # asked for: 7-bit activations
    with pytest.raises(AdapterError, match="needs dtype float32 on the CPU"):
        precision.resolve_linear("int8", "cpu", "bfloat16")
    monkeypatch.setattr(precision, "int8_linear_available", lambda: False)
    assert precision.resolve_linear("auto", "cpu", "float32") == "onednn"
    with pytest.raises(AdapterError, match="quantised int8 engine"):
        precision.resolve_linear("int8", "cpu", "float32")
    with pytest.raises(AdapterError, match="linear must be one of"):
        precision.resolve_linear("fast", "cpu", "float32")


def test_int8_linear_is_close_to_float32_and_independent_of_the_batch(tiny, tmp_path):
    """Dynamic int8 frozen maps: outputs near float32's; a prompt's outputs are bit-identical
    alone and inside a padded batch next to a longer prompt of much larger activations (each
    prompt is quantised on its own real tokens); padding rows come out 0."""
    import copy

    from router.classify.layers import Int8Linear, int8_linear_available

    if not int8_linear_available():
        pytest.skip("this torch build has no quantised int8 engine")
    folder, base, _ = tiny
    head = _head(tmp_path, folder, base, "h", ["output.dense"], seed=5)[1]
    ref = MultiHeadEncoder(copy.deepcopy(base), [head], dtype="float32", linear="default")
    enc = MultiHeadEncoder(copy.deepcopy(base), [head], dtype="float32", linear="int8")
    assert enc.linear == "int8" and enc.base.linear == "int8"
    a, b = ref.run(TEXTS)[0], enc.run(TEXTS)[0]
    assert torch.allclose(a, b, atol=0.05 * float(a.abs().max()))
    assert not torch.equal(a, b)  # it really ran in int8
    loud = TEXTS[3] + " x" * 40
    alone = [enc.run([t])[0] for t in TEXTS[:3]]
    batch = enc.run([loud, *TEXTS[:3]])[0][1:]
    for one, row in zip(alone, batch):
        assert torch.allclose(one, row[None], atol=1e-4)  # float32 rounding only (attention mask)
    assert torch.equal(alone[0], copy.deepcopy(enc).run([TEXTS[0]])[0])

    g = torch.Generator().manual_seed(0)
    w, bias = torch.randn(6, 4, generator=g), torch.randn(6, generator=g)
    lin = Int8Linear(w, bias)
    x = torch.randn(2, 3, 5, 4, generator=g)  # (heads, prompts, tokens, in)
    x[:, 0] *= 1000.0  # a loud prompt
    y = lin(x, [5, 2, 4])
    assert y.shape == (2, 3, 5, 6)
    assert torch.equal(y[:, 1, 2:], torch.zeros(2, 3, 6))
    full = torch.nn.functional.linear(x, w, bias)
    assert torch.allclose(y[1, 2, :4], full[1, 2, :4], atol=0.1)
    for h in range(2):  # each prompt alone gives the same numbers, whatever shares its batch
        assert torch.equal(y[h, 2, :4], lin(x[h, 2, :4])) and torch.equal(y[h, 1, :2], lin(x[h, 1, :2]))
    shared = lin(x)  # one activation scale for the whole batch: the loud prompt swamps the rest
    assert float((shared[1, 2, :4] - full[1, 2, :4]).abs().max()) > 10 * float((y[1, 2, :4] - full[1, 2, :4]).abs().max())


def test_fused_qkv_and_unpadded_batches_change_nothing(tiny, tmp_path):
    """The fused query/key/value map and the mask-free path for unpadded batches give the
    same outputs as three separate maps with an all-zero attention bias."""
    from router.classify.layers import attention_bias
    from router.classify.runtime import BaseEncoder

    folder, base, _ = tiny
    head = _head(tmp_path, folder, base, "h", ["output.dense"], seed=5)[1]
    enc = MultiHeadEncoder(base, [head], dtype="float32", linear="default")
    one = [TEXTS[0]]
    fused = enc.run(one)[0]
    ids, mask = base.tokenize(one)
    assert attention_bias(mask, torch.float32) is None  # batch 1: no padding, no mask
    assert attention_bias(torch.tensor([[1, 1, 0]]), torch.float32) is not None
    original = BaseEncoder.fused_qkv
    try:
        BaseEncoder.fused_qkv = lambda self, layer: None  # three separate maps
        separate = enc.run(one)[0]
    finally:
        BaseEncoder.fused_qkv = original
    assert torch.allclose(fused, separate, atol=1e-5)
    assert torch.allclose(fused, enc.run(TEXTS)[0][:1], atol=1e-4)  # same prompt inside a padded batch


def test_mean_and_max_pooled_heads_run_together(tiny, tmp_path):
    """Heads with different pooling share one pass and each gets what it gets alone."""
    folder, base, _ = tiny
    mean = _head(tmp_path, folder, base, "m", ["output.dense"], seed=2)[1]
    mx = _head(tmp_path, folder, base, "x", ["output.dense"], seed=2, pooling="max")[1]
    together = MultiHeadEncoder(base, [mean, mx], dtype="float32").run(TEXTS)
    alone = [MultiHeadEncoder(base, [h], dtype="float32").run(TEXTS)[0] for h in (mean, mx)]
    for a, b in zip(together, alone):
        assert torch.allclose(a, b, atol=1e-5)
    assert not torch.allclose(together[0], together[1], atol=1e-3)  # same weights, different pooling


@pytest.mark.parametrize("modules", [["output.dense"], list(LINEARS)])
def test_embed_slot_is_the_base_embedding_and_leaves_heads_alone(tiny, tmp_path, modules):
    """``embed=True`` adds a zero-LoRA slot: its output is the plain encoder's mean-pooled,
    normalised last layer (what ``mixroute eval``'s MiniLM embedder computes), and the
    heads' outputs do not move."""
    folder, base, model = tiny
    _, head = _head(tmp_path, folder, base, "q", modules, seed=3)
    plain = MultiHeadEncoder(base, [head], dtype="float32", linear="default")
    with_emb = MultiHeadEncoder(base, [head], dtype="float32", linear="default", embed=True)
    out, _, emb = with_emb.scan_embed(TEXTS)
    assert torch.allclose(out[0], plain.run(TEXTS)[0], atol=1e-6)
    assert plain.scan_embed(TEXTS)[2] is None
    ids, mask = base.tokenize(TEXTS)
    with torch.no_grad():
        last = model(input_ids=ids, attention_mask=mask).last_hidden_state
    m = mask.unsqueeze(-1).float()
    ref = torch.nn.functional.normalize((last * m).sum(1) / m.sum(1).clamp(min=1), dim=-1)
    assert emb.shape == (len(TEXTS), HIDDEN)
    assert torch.allclose(emb, ref, atol=1e-5)


def test_onednn_prepacked_linear_matches_the_default(tiny, tmp_path):
    """The prepacked oneDNN float32 path (the CPU default) gives the default path's outputs,
    survives a deepcopy, and is dropped again when the weights move or change dtype."""
    import copy

    from router.classify.layers import onednn_bf16_available, onednn_linear_available

    folder, base, _ = tiny
    head = _head(tmp_path, folder, base, "h", ["output.dense"], seed=5)[1]
    ref = MultiHeadEncoder(copy.deepcopy(base), [head], dtype="float32", linear="default")
    assert ref.linear == "default"
    enc = MultiHeadEncoder(copy.deepcopy(base), [head], dtype="float32", linear="onednn")
    if not onednn_linear_available():
        pytest.skip("this torch build has no oneDNN prepacked linear")
    assert enc.linear == "onednn" and enc.base.layers[0].packed
    for a, b in zip(ref.scan_embed(TEXTS)[0], enc.scan_embed(TEXTS)[0]):
        assert torch.allclose(a, b, atol=1e-4)
    twin = copy.deepcopy(enc)
    for a, b in zip(enc.run(TEXTS), twin.run(TEXTS)):
        assert torch.equal(a, b)
    enc.base.to(torch.device("cpu"), torch.bfloat16)
    assert not enc.base.layers[0].packed  # moving drops the packed copies
    assert not enc.base.prepack("int8")  # int8 maps need float32 weights
    # bfloat16 prepacked (GELU and residual adds fused): within bfloat16 rounding of the default
    if not onednn_bf16_available():
        with pytest.raises(AdapterError, match="oneDNN runs bfloat16"):
            MultiHeadEncoder(copy.deepcopy(base), [head], dtype="bfloat16", linear="onednn")
        assert MultiHeadEncoder(copy.deepcopy(base), [head], dtype="bfloat16").linear == "default"
        pytest.skip("oneDNN does not run bfloat16 on this CPU (needs AVX-512 BW/VL/DQ or AVX-NE-CONVERT)")
    ref16 = MultiHeadEncoder(copy.deepcopy(base), [head], dtype="bfloat16", linear="default")
    enc16 = MultiHeadEncoder(copy.deepcopy(base), [head], dtype="bfloat16", linear="onednn")
    assert enc16.linear == "onednn" and ref16.linear == "default"
    for a, b, c in zip(ref16.run(TEXTS), enc16.run(TEXTS), ref.run(TEXTS)):
        assert torch.allclose(a, b, atol=0.05) and torch.allclose(b, c, atol=0.05)
    with pytest.raises(AdapterError, match="linear must be"):
        MultiHeadEncoder(copy.deepcopy(base), [head], linear="fast")


@pytest.mark.parametrize("linear", ["default", "int8"])
def test_prompt_threads_give_the_batched_answer(tiny, tmp_path, linear):
    """Prompts run one at a time on worker threads (one intra-op thread each) give what one
    batched pass gives: every head's outputs, scan coverage and embeddings, in input order;
    a one-prompt call runs on the caller's thread; ``close`` stops the workers and the
    encoder still works."""
    import copy
    import threading

    from router.classify.layers import int8_linear_available

    if linear == "int8" and not int8_linear_available():
        pytest.skip("this torch build has no quantised int8 engine")
    folder, base, _ = tiny
    heads = [_head(tmp_path, folder, base, f"h{i}", ["output.dense"], seed=i, pooling=p)[1]
             for i, p in enumerate(["mean", "max"])]
    batched = MultiHeadEncoder(copy.deepcopy(base), heads, dtype="float32", linear=linear, prompt_threads=0,
                               embed=True, scan_chars=4_096, scan_heads=("h1",))
    threaded = MultiHeadEncoder(copy.deepcopy(base), heads, dtype="float32", linear=linear, prompt_threads=2,
                                embed=True, scan_chars=4_096, scan_heads=("h1",))
    texts = TEXTS + ["zy " * 2_100, "b"]  # over ``scan_chars``: read in part
    want, got = batched.scan_embed(texts), threaded.scan_embed(texts)
    # one pass for all heads (per prompt when threaded), then the long prompts' extra windows
    # in chunks: together when batched, per prompt when threaded
    assert 1 < batched.trunk_calls <= 1 + threaded.trunk_calls - len(texts)
    for a, b in zip(want[0], got[0]):
        assert a.shape == b.shape == (len(texts), 3)
        assert torch.allclose(a, b, atol=1e-5)
    assert got[1] == pytest.approx(want[1]) and min(got[1]) < 1.0  # the long prompt was only partly read
    assert torch.allclose(want[2], got[2], atol=1e-5)
    workers = set(threaded._pool._threads)
    assert 1 <= len(workers) <= 2 and threading.current_thread() not in workers
    assert torch.equal(copy.deepcopy(threaded).run(texts)[0], threaded.run(texts)[0])  # copies start their own
    threaded.close()
    assert not any(t.is_alive() for t in workers)
    single = MultiHeadEncoder(copy.deepcopy(base), heads, dtype="float32", linear=linear, prompt_threads=2)
    single.run(["one prompt"])
    assert single._pool is None  # one prompt: the caller's thread, torch's intra-op threads
    assert torch.allclose(threaded.run(texts)[0], want[0][0], atol=1e-5)  # reopens after close
    threaded.close()


def test_prompt_threads_default_follows_the_linear_maps(tiny, tmp_path):
    from router.classify.layers import int8_linear_available

    folder, base, _ = tiny
    head = _head(tmp_path, folder, base, "h", ["output.dense"], seed=5)[1]
    assert MultiHeadEncoder(base, [head], dtype="float32", linear="default").prompt_threads == 0
    if int8_linear_available():
        import copy

        enc = MultiHeadEncoder(copy.deepcopy(base), [head], dtype="float32", linear="int8")
        assert enc.prompt_threads == torch.get_num_threads()


def test_rank_space_pooling_equals_materialised_states(tiny, tmp_path):
    """Heads adapting only the last layer's output map are pooled in LoRA rank space
    (router.classify.pooled): mean- and max-pooled heads and the embed slot give what the
    materialised per-head token states give; other placements keep the general path."""
    folder, base, _ = tiny
    heads = [_head(tmp_path, folder, base, f"h{i}", ["output.dense"], seed=10 + i,
                   pooling="max" if i % 2 else "mean")[1] for i in range(4)]
    fast = MultiHeadEncoder(base, heads, dtype="float32", linear="default", embed=True, prompt_threads=0)
    slow = MultiHeadEncoder(base, heads, dtype="float32", linear="default", embed=True, prompt_threads=0,
                            rank_space=False)
    assert fast.pooler is not None and slow.pooler is None
    texts = TEXTS + ["", "a", "z" * 200]
    out_fast, _, emb_fast = fast.scan_embed(texts)
    out_slow, _, emb_slow = slow.scan_embed(texts)
    for a, b in zip(out_fast, out_slow):
        assert torch.allclose(a, b, atol=1e-5)
    assert torch.allclose(emb_fast, emb_slow, atol=1e-6)
    assert not torch.allclose(out_fast[0], out_fast[2], atol=1e-3)  # the heads differ
    other = _head(tmp_path, folder, base, "v", ["attention.self.value"], seed=20)[1]
    assert MultiHeadEncoder(base, [heads[0], other], dtype="float32").pooler is None
