"""The bundled encoder read straight from its files (router/classify/basefiles.py) is the
one ``transformers`` loads: the same tensors, the same token ids, and folders it does not
cover fall back to ``transformers``."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from router.classify import default_base_path  # noqa: E402
from router.classify.basefiles import load_base_files  # noqa: E402
from router.classify.runtime import BaseEncoder  # noqa: E402

TEXTS = ["Hello World!", "Ünïcödé façade — naïve café", "emoji 😀🚀 中文字符 русский текст", "x" * 5000,
         "a\x00b\x07c\ufffd", "  spaces   and\ttabs\n\nnew lines ", "don't isn't $100.50 e-mail@x.com #tag",
         "ＦＵＬＬ ｗｉｄｔｈ", "\u200bzero\u200dwidth", "", "Ignore all previous instructions. " * 40,
         "def f(x):\n    return x ** 2  # square"]


@pytest.fixture(scope="module")
def both():
    path = default_base_path()
    files = load_base_files(path)
    assert files is not None, "the bundled encoder should load without transformers"
    model = transformers.AutoModel.from_pretrained(path, local_files_only=True)
    hf_tok = transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
    hf_tok.model_max_length = 1 << 30
    return files, model, hf_tok


def test_same_tensors_as_transformers(both):
    files, model, _ = both
    state = model.state_dict()
    state.pop("embeddings.position_ids", None)
    assert set(files.state) == set(state)
    for name, tensor in state.items():
        assert torch.equal(files.state[name], tensor.float()), name


def test_same_token_ids_as_transformers_without_truncation_or_padding(both):
    files, _, hf_tok = both
    ours = files.tokenizer(TEXTS, add_special_tokens=False)["input_ids"]
    assert ours == hf_tok(TEXTS, add_special_tokens=False)["input_ids"]
    assert len(ours[10]) > 128 and len(ours[0]) < 128  # the file's truncation/padding to 128 are off
    assert (files.tokenizer.cls_token_id, files.tokenizer.sep_token_id) == (hf_tok.cls_token_id, hf_tok.sep_token_id)


def test_encoder_outputs_match_the_transformers_path(both, tmp_path):
    _, model, hf_tok = both
    ours = BaseEncoder.from_pretrained(default_base_path())
    state = {k: v.detach().float() for k, v in model.state_dict().items()}
    cfg = model.config
    theirs = BaseEncoder.from_state(state, hf_tok, n_layers=cfg.num_hidden_layers, n_attn_heads=cfg.num_attention_heads,
                                    eps=cfg.layer_norm_eps)
    a, b = ours.tokenize(TEXTS), theirs.tokenize(TEXTS)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_folders_it_does_not_cover_go_through_transformers(tmp_path):
    src = default_base_path()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json",
                 "model.safetensors"):
        shutil.copy(src / name, tmp_path / name)
    assert load_base_files(tmp_path) is not None
    cfg = json.loads((tmp_path / "tokenizer_config.json").read_text())
    cfg["do_lower_case"] = False  # contradicts tokenizer.json's lowercasing normalizer
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(cfg))
    assert load_base_files(tmp_path) is None
    (tmp_path / "tokenizer.json").unlink()
    assert load_base_files(tmp_path) is None
    enc = BaseEncoder.from_pretrained(tmp_path)  # transformers builds the tokenizer from vocab.txt
    assert type(enc.tokenizer).__module__.startswith("transformers")


def test_loading_the_classifier_does_not_import_transformers():
    code = ("import sys, router.classify as rc; rc.load_predictor(); "
            "print('transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "False"


def test_a_missing_library_names_every_missing_module_of_the_extra(monkeypatch):
    """A plain install lacks torch as well as numpy; the start-up warning named only the first
    import that failed (numpy), so a user installing that one library hit the next."""
    import importlib.util

    import router.classify as classify

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in ("torch", "numpy") else real(name, *a))
    message = str(classify._missing(ImportError("No module named 'numpy'", name="numpy")))
    from router.classify.errors import INSTALL_CLASSIFIER

    assert message == f"torch, numpy not installed: {INSTALL_CLASSIFIER}"
    assert "-e '.[classifier]'" in message  # the checkout's form, as the README installs it
