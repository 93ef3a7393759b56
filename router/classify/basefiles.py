"""Load a local BERT encoder folder straight from its files (``config.json``,
``model.safetensors``, ``tokenizer.json``) with ``safetensors`` and ``tokenizers``, without
importing ``transformers``.

Why: importing ``transformers`` and building the model through ``AutoModel.from_pretrained``
takes seconds of the gateway's start-up, where reading the same weights and tokenizer here
takes a few hundredths of one (figures in docs/BENCHMARKS.md); the tensors and token ids are
the same (``tests/classify/test_basefiles.py``). Folders this module does not cover
(another architecture or tokenizer, PyTorch ``.bin`` weights, a tokenizer whose
``tokenizer_config.json`` contradicts its ``tokenizer.json``): :func:`load_base_files` returns
``None`` for them and :func:`load_base` loads them through ``transformers`` as before.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The tokenizer classes whose fast version is exactly ``tokenizer.json`` (WordPiece + BertNormalizer).
_BERT_TOKENIZERS = ("BertTokenizer", "BertTokenizerFast")


@dataclass(frozen=True)
class BaseFiles:
    """What :func:`load_base_files` read: ``state`` (parameter name -> float32 tensor, as
    ``AutoModel``'s ``state_dict`` names them), ``config`` (``config.json``; at least
    ``num_hidden_layers``, ``num_attention_heads``) and a ``tokenizer`` with the calls the
    encoder makes (:class:`WordPieceTokenizer`, or a ``transformers`` tokenizer)."""

    state: dict[str, Any]
    config: dict[str, Any]
    tokenizer: Any


class WordPieceTokenizer:
    """The subset of a Hugging Face fast tokenizer the encoder uses, over a
    ``tokenizers.Tokenizer`` with its file's truncation and padding turned off (the encoder
    cuts and pads itself): ``tok(texts, add_special_tokens=False)["input_ids"]``,
    ``cls_token_id``, ``sep_token_id``."""

    def __init__(self, tokenizer: Any, cls_token: str, sep_token: str):
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self._tok = tokenizer
        self.cls_token_id = tokenizer.token_to_id(cls_token)
        self.sep_token_id = tokenizer.token_to_id(sep_token)
        if self.cls_token_id is None or self.sep_token_id is None:
            raise ValueError(f"the vocabulary has no {cls_token!r} or {sep_token!r}")

    def __call__(self, texts: list[str], add_special_tokens: bool = True) -> dict[str, list[list[int]]]:
        return {"input_ids": [e.ids for e in self._tok.encode_batch(texts, add_special_tokens=add_special_tokens)]}


def load_base_files(path: Path) -> BaseFiles | None:
    """Read a BERT encoder folder without ``transformers``, or ``None`` when the folder is not
    one this module covers (module docstring); never raises for that, only for unreadable
    files of a folder it covers (``OSError``, ``ValueError``)."""
    path = Path(path)
    files = [path / name for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")]
    if not all(f.is_file() for f in files):
        return None
    config = json.loads(files[0].read_text())
    tok_config = json.loads(files[3].read_text())
    tok_json = json.loads(files[2].read_text())
    normalizer = tok_json.get("normalizer") or {}
    if (config.get("model_type") != "bert" or tok_config.get("tokenizer_class") not in _BERT_TOKENIZERS
            or normalizer.get("type") != "BertNormalizer"
            or bool(normalizer.get("lowercase")) != bool(tok_config.get("do_lower_case", True))
            or normalizer.get("strip_accents") != tok_config.get("strip_accents")
            or bool(normalizer.get("handle_chinese_chars")) != bool(tok_config.get("tokenize_chinese_chars", True))):
        return None
    from safetensors.torch import load_file
    from tokenizers import Tokenizer

    raw = load_file(str(files[1]))
    prefix = "bert." if any(k.startswith("bert.") for k in raw) else ""
    state = {k.removeprefix(prefix): v.float() for k, v in raw.items()
             if k.startswith(prefix) and not k.endswith("position_ids")}
    tokenizer = WordPieceTokenizer(Tokenizer.from_file(str(files[2])), _token(tok_config, "cls_token", "[CLS]"),
                                   _token(tok_config, "sep_token", "[SEP]"))
    return BaseFiles(state, config, tokenizer)


def load_base(path: Path) -> BaseFiles:
    """A base encoder folder: through :func:`load_base_files` where it covers the folder, else
    through ``transformers`` (``AutoModel`` state as float32, ``AutoTokenizer`` with no length
    limit: the encoder cuts to its own).

    Raises:
        ImportError: ``transformers`` is needed for this folder and not installed.
        OSError, ValueError: unreadable files.
    """
    files = load_base_files(path)
    if files is not None:
        return files
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    cfg = AutoConfig.from_pretrained(path, local_files_only=True)
    model = AutoModel.from_pretrained(path, local_files_only=True)
    state = {k: v.detach().float() for k, v in model.state_dict().items()}
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    tok.model_max_length = 1 << 30  # we cut to max_tokens ourselves (head + tail)
    config = {"num_hidden_layers": cfg.num_hidden_layers, "num_attention_heads": cfg.num_attention_heads,
              "layer_norm_eps": cfg.layer_norm_eps}
    return BaseFiles(state, config, tok)


def _token(tok_config: dict, key: str, default: str) -> str:
    # A special token is a string or an AddedToken object ({"content": "[CLS]", ...}).
    value = tok_config.get(key, default)
    return value.get("content", default) if isinstance(value, dict) else str(value)
