"""The serving runtime: one shared trunk pass per batch, then every head's LoRA layer(s).

``MultiHeadEncoder.run(texts)`` tokenises a batch (head + tail truncation), runs the
embeddings and the frozen layers below the lowest adapted layer ONCE, runs the adapted
top layer(s) for all heads together (heads stacked on a leading axis, see
:mod:`router.classify.layers`), mean-pools, and applies each head's output layer.
``trunk_calls`` counts the shared passes (tests assert that heads do not add to it).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from router.classify.errors import AdapterError
from router.classify.heads import Head
from router.classify.layers import (LINEARS, POOLING, Int8Linear, LayerWeights, PackedLinear, PlainLinear,
                                    StackedLinear, attention_bias, bert_layer, cpu_has_vnni, int8_linear_available,
                                    onednn_bf16_available, onednn_linear_available)
from router.classify.pooled import RankSpacePooler, rank_space_ok
from router.classify.precision import resolve_dtype, resolve_linear
from router.classify.scan import Tiled, tile
from router.classify.scancache import ScanCache, window_key
from router.classify.text import pad_batch


@dataclass
class BaseEncoder:
    """Frozen base encoder: tokenizer, embeddings, layer weights (BERT family).

    Attributes:
        max_tokens: tokens per prompt including ``[CLS]``/``[SEP]``; head_tokens of them
            come from the start of a long prompt, the rest from its end.
    """

    tokenizer: Any
    embeddings: dict[str, torch.Tensor]
    layers: list[LayerWeights]
    n_attn_heads: int
    hidden: int
    eps: float
    max_tokens: int = 128
    head_tokens: int = 32
    name: str = ""
    _qkv: dict[int, Callable[[torch.Tensor], torch.Tensor]] = field(default_factory=dict, repr=False)

    @classmethod
    def from_pretrained(cls, path: Path, *, max_tokens: int = 128, head_tokens: int = 32,
                        name: str = "") -> "BaseEncoder":
        """Load a local Hugging Face BERT-style encoder folder (no network), through
        :func:`router.classify.basefiles.load_base` (its files directly where it can, else
        ``transformers``)."""
        from router.classify.basefiles import load_base

        files = load_base(path)
        cfg = files.config
        return cls.from_state(files.state, files.tokenizer, n_layers=cfg["num_hidden_layers"],
                              n_attn_heads=cfg["num_attention_heads"], eps=cfg.get("layer_norm_eps", 1e-12),
                              max_tokens=max_tokens, head_tokens=head_tokens, name=name or str(path))

    @classmethod
    def from_state(cls, state: dict[str, torch.Tensor], tokenizer: Any, *, n_layers: int, n_attn_heads: int,
                   eps: float = 1e-12, max_tokens: int = 128, head_tokens: int = 32, name: str = "") -> "BaseEncoder":
        emb = {k.removeprefix("embeddings."): v for k, v in state.items() if k.startswith("embeddings.")}
        layers = [LayerWeights.from_state(state, f"encoder.layer.{i}.") for i in range(n_layers)]
        return cls(tokenizer, emb, layers, n_attn_heads, emb["word_embeddings.weight"].shape[1], eps,
                   max_tokens, head_tokens, name)

    @property
    def positions(self) -> int:
        """Most tokens one window may hold (rows of the position embeddings): a ``max_tokens``
        above it cannot be embedded."""
        return self.embeddings["position_embeddings.weight"].shape[0]

    def tokenize(self, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(input_ids (B, T), mask (B, T))`` with head + tail truncation to ``max_tokens``."""
        return pad_batch(self.tile(texts, 0).mains)

    def tile(self, texts: list[str], scan_chars: int) -> Tiled:
        """Main windows plus, for prompts up to ``scan_chars`` characters, windows tiling
        all the rest (:func:`router.classify.scan.tile`)."""
        return tile(self.tokenizer, texts, budget=self.max_tokens - 2, head=self.head_tokens, scan_chars=scan_chars)

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        e = self.embeddings
        pos = torch.arange(ids.shape[1])
        x = F.embedding(ids, e["word_embeddings.weight"]) + e["position_embeddings.weight"][pos] \
            + e["token_type_embeddings.weight"][0]
        return F.layer_norm(x, x.shape[-1:], e["LayerNorm.weight"], e["LayerNorm.bias"], eps=self.eps)

    def trunk(self, ids: torch.Tensor, mask: torch.Tensor, upto: int) -> torch.Tensor:
        """Hidden states ``(B, T, D)`` entering layer ``upto`` (frozen, no LoRA)."""
        x = self.embed(ids)
        bias = attention_bias(mask, x.dtype)
        lengths = real_lengths(mask)
        for i, lw in enumerate(self.layers[:upto]):
            x = bert_layer(x, bias, lw, self.n_attn_heads, partial(lw.apply, lengths=lengths), self.eps,
                           qkv=with_lengths(self.fused_qkv(i), lengths), lengths=lengths, frozen=True)
        return x

    def fused_qkv(self, layer: int) -> Callable[..., torch.Tensor]:
        """The frozen fused query/key/value map of ``layer`` as ``(x, lengths=None) -> x Wqkv^T + b``
        (built once, after :meth:`to`; prepacked for oneDNN or int8 after :meth:`prepack`)."""
        if layer not in self._qkv:
            w, b = self.layers[layer].qkv()
            packed = next(iter(self.layers[layer].packed.values()), None)  # prepack() ran since the last to()
            if isinstance(packed, Int8Linear):
                self._qkv[layer] = Int8Linear(w, b, packed.reduce_range)
            else:
                self._qkv[layer] = PackedLinear(w, b) if packed is not None else PlainLinear(w, b)
        return self._qkv[layer]

    @property
    def linear(self) -> str:
        """How the frozen linear maps run: ``int8``, ``onednn`` or ``default``."""
        packed = next(iter(self.layers[0].packed.values()), None) if self.layers else None
        return "int8" if isinstance(packed, Int8Linear) else "onednn" if packed is not None else "default"

    def prepack(self, kind: str = "onednn") -> bool:
        """Set up every frozen linear map as ``onednn`` (prepacked float32 or bfloat16,
        :class:`router.classify.layers.PackedLinear`) or ``int8`` (dynamic int8,
        :class:`router.classify.layers.Int8Linear`, float32 weights): CPU weights only, and
        only where torch has the op (bfloat16: where oneDNN runs it on this CPU). Returns
        whether it did."""
        w0 = self.layers[0].w[LINEARS[0]][0]
        if kind == "onednn":
            available = onednn_bf16_available() if w0.dtype == torch.bfloat16 else onednn_linear_available()
        else:
            available = int8_linear_available()
        dtypes = (torch.float32, torch.bfloat16) if kind == "onednn" else (torch.float32,)
        if w0.device.type != "cpu" or w0.dtype not in dtypes or not available:
            return False
        for lw in self.layers:
            lw.prepack(kind, reduce_range=not cpu_has_vnni())
        self._qkv.clear()
        return True

    def to(self, device: torch.device, dtype: torch.dtype = torch.float32) -> "BaseEncoder":
        """Move (in place) to ``device`` and cast the weights to ``dtype``."""
        def cast(t: torch.Tensor) -> torch.Tensor:
            return t.to(device=device, dtype=dtype)

        self.embeddings = {k: cast(v) for k, v in self.embeddings.items()}
        for lw in self.layers:
            lw.w = {k: (cast(w), cast(b)) for k, (w, b) in lw.w.items()}
            lw.ln_attn = tuple(cast(t) for t in lw.ln_attn)  # type: ignore[assignment]
            lw.ln_out = tuple(cast(t) for t in lw.ln_out)  # type: ignore[assignment]
            lw.packed = {}  # packed copies of the old weights
        self._qkv.clear()
        return self


def with_lengths(fn: Callable[..., torch.Tensor] | None, lengths: list[int]) -> Callable[..., torch.Tensor] | None:
    """``fn`` with its ``lengths`` argument bound (``None`` stays ``None``)."""
    return None if fn is None else partial(fn, lengths=lengths)


def real_lengths(mask: torch.Tensor) -> list[int]:
    """Real (non-padding) tokens per prompt of a ``(B, T)`` 0/1 mask."""
    return [int(n) for n in mask.sum(1).tolist()]


#: Heads that read every window of a long prompt (see :meth:`MultiHeadEncoder.scan`).
SCAN_HEADS = ("pii", "injection")

#: Extra scan windows per encoder pass: bounds the attention scores' memory of a long prompt.
SCAN_CHUNK = 32


class MultiHeadEncoder:
    """The base encoder plus ``H`` heads sharing its lower layers.

    Args:
        base: the frozen encoder.
        heads: loaded heads; their LoRA may sit in different top layers/modules, and the
            trunk runs up to the lowest adapted layer of any head.
        device: ``cpu`` (default) or ``cuda``.
        dtype: ``auto`` (default: :func:`resolve_dtype`), ``float32`` or ``bfloat16``
            (several times faster on CPUs with AMX/AVX-512 BF16 and on GPUs; hidden states
            differ by about 1% relative, held-out AUCs by about 0.002, docs/CLASSIFIER.md).
            Output layers stay float32. The resolved value is ``self.dtype``.
        scan_chars: prompts up to this many characters are read whole by ``scan_heads``
            (:mod:`router.classify.scan`; a longer one keeps its first and last half of it;
            0: only the main head + tail window). Each extra window costs one encoder row
            unless ``scan_cache`` holds it.
        scan_heads: heads whose output for a long prompt is the most alarming window's
            (highest calibrated output), not the main window's: an attack or personal data
            in the middle of a long prompt must not hide past the truncation point.
        scan_cache: the scan heads' outputs per extra window, shared by calls (a repeated
            prefix is read once, :class:`router.classify.scancache.ScanCache`); default a
            new one of the default size.
        embed: also return each prompt's base-encoder embedding (:meth:`scan_embed`): the
            top layer(s) without any LoRA delta, mean-pooled and L2-normalised, which is
            the sentence-transformers all-MiniLM-L6-v2 embedding of the main window
            (:class:`router.eval.embed.MiniLMEmbedder` computes the same vector). It runs
            as one more stacked head with zero LoRA, so it shares the trunk pass.
        linear: how the frozen linear maps run (:func:`resolve_linear`): ``auto`` (default:
            ``int8`` for float32 on CPUs with VNNI, else ``onednn`` on the CPU, else
            ``default``), ``int8`` (dynamic int8, :class:`router.classify.layers.Int8Linear`:
            each prompt quantised on its own, so results do not depend on the batch),
            ``onednn`` (float32 or bfloat16 with prepacked weights, GELU and residual adds
            fused into the matmuls) or ``default`` (torch's ``F.linear``).
            LoRA deltas, attention, layer norms and output layers stay in ``dtype``. The
            resolved choice is ``self.linear``.
        prompt_threads: run the prompts of a call with more than one prompt one at a time on
            this many threads, each with one intra-op thread, instead of as one batch on
            torch's intra-op threads (a call with one prompt always runs on the caller's
            thread with torch's intra-op threads, for latency). ``None`` (default): torch's
            intra-op thread count on the CPU with ``int8`` maps, else 0 (batched): per-prompt
            int8 maps gain nothing from batching, and a few intra-op threads split small
            matrices poorly (``mixroute bench classifier --prompt-threads 0,2``;
            docs/BENCHMARKS.md, "Prompt threads"). Outputs are the same as
            batched (int8: each prompt is quantised on its own either way; float: up to
            rounding).
        rank_space: when every head adapts only the top layer's output map, pool them in LoRA
            rank space (:class:`router.classify.pooled.RankSpacePooler`, ``self.pooler``);
            ``False`` materialises every head's token states (the general path; same
            outputs up to rounding, slower with many heads).

    Raises:
        AdapterError: no heads, or a head adapts a layer/module the base does not have.
    """

    def __init__(self, base: BaseEncoder, heads: list[Head], device: str = "cpu", dtype: str = "auto",
                 scan_chars: int = 0, scan_heads: tuple[str, ...] = SCAN_HEADS, embed: bool = False,
                 linear: str = "auto", prompt_threads: int | None = None, rank_space: bool = True,
                 scan_cache: ScanCache | None = None):
        if not heads:
            raise AdapterError("no heads to run")
        dtype = resolve_dtype(dtype, device, linear)
        self.device = torch.device(device)
        self.dtype = getattr(torch, dtype)
        self.base = base.to(self.device, self.dtype)
        wanted = resolve_linear(linear, device, dtype)
        if wanted != "default":
            self.base.prepack(wanted)
        self.heads = heads
        n_layers = len(base.layers)
        wheres = {w for h in heads for w in h.lora}
        for layer, module in wheres:
            if not 0 <= layer < n_layers or module not in base.layers[layer].w:
                raise AdapterError(f"a head adapts encoder.layer.{layer}.{module}, which the base lacks")
        self.split = min((w[0] for w in wheres), default=n_layers)
        self.embed = bool(embed)
        self.top = [StackedLinear(base.layers[i], self._stack(i)) for i in range(self.split, n_layers)]
        rank_space = rank_space and len(self.top) == 1 and rank_space_ok(self.top[0])
        self.pooler = RankSpacePooler(self.top[0], self.base.n_attn_heads, self.base.eps) if rank_space else None
        self.out = [(h.out_weight.to(self.device), h.out_bias.to(self.device)) for h in heads]
        self.trunk_calls = 0
        self.scan_chars = max(0, int(scan_chars))
        self.scan_heads = tuple(scan_heads)
        self.scan_cache = scan_cache if scan_cache is not None else ScanCache()
        self._scanned = [j for j, h in enumerate(heads)
                         if h.name in self.scan_heads and h.config.kind != "log_regression"]
        if prompt_threads is None:
            prompt_threads = torch.get_num_threads() if self.device.type == "cpu" and self.linear == "int8" else 0
        self.prompt_threads = max(0, int(prompt_threads)) if self.device.type == "cpu" else 0
        self._pool: ThreadPoolExecutor | None = None

    @property
    def linear(self) -> str:
        """How the frozen linear maps run (``int8``, ``onednn`` or ``default``): the base's."""
        return self.base.linear

    def _stack(self, layer: int) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        stacked = {}
        for module in {m for h in self.heads for (li, m) in h.lora if li == layer}:
            w = self.base.layers[layer].w[module][0]
            r = max(h.lora[(layer, module)][0].shape[0] for h in self.heads if (layer, module) in h.lora)
            stack = len(self.heads) + self.embed  # the embedding's zero-LoRA slot comes last
            a = torch.zeros(stack, r, w.shape[1])
            b = torch.zeros(stack, w.shape[0], r)
            for i, h in enumerate(self.heads):
                if (layer, module) in h.lora:
                    ha, hb = h.lora[(layer, module)]
                    a[i, : ha.shape[0]] = ha
                    b[i, :, : hb.shape[1]] = hb
            stacked[module] = (a.to(self.device, self.dtype), b.to(self.device, self.dtype))
        return stacked

    def run(self, texts: list[str]) -> list[torch.Tensor]:
        """Raw outputs per head, in ``self.heads`` order: each ``(B, n_labels)`` on CPU."""
        return self.scan(texts)[0]

    def scan(self, texts: list[str]) -> tuple[list[torch.Tensor], list[float]]:
        """:meth:`run` plus the share of each prompt's characters the windows saw.

        Every head reads the main (head + tail) window; a head in ``scan_heads`` reports,
        per output, its highest calibrated value over the main and the extra windows.

        Returns:
            ``(raw outputs per head, each (B, n_labels), coverage per prompt in [0, 1])``.
        """
        out, coverage, _ = self.scan_embed(texts)
        return out, coverage

    def scan_embed(self, texts: list[str]) -> tuple[list[torch.Tensor], list[float], torch.Tensor | None]:
        """:meth:`scan` plus each prompt's embedding ``(B, D)`` float32 of its main window
        (``None`` unless the encoder was built with ``embed=True``)."""
        return self._per_prompt(self._scan_embed, texts)

    def scan_main(self, texts: list[str]
                  ) -> tuple[list[torch.Tensor], list[float], torch.Tensor | None, list[list[list[int]]]]:
        """The main windows' pass alone: :meth:`scan_embed`'s outputs before the extra
        windows are read, plus each prompt's extra windows (token ids; empty where there are
        none or no head reads them) for :meth:`window_rows` and :meth:`pick_alarming`."""
        return self._per_prompt(self._scan_main, texts)

    def _per_prompt(self, fn: Callable[[list[str]], tuple], texts: list[str]) -> tuple:
        """``fn(texts)``, or with ``prompt_threads``, ``fn`` per prompt on the threads, joined."""
        if self.prompt_threads < 2 or len(texts) < 2:
            return fn(texts)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.prompt_threads, thread_name_prefix="classifier",
                                            initializer=torch.set_num_threads, initargs=(1,))
        parts = list(self._pool.map(fn, [[t] for t in texts]))
        out = [torch.cat([p[0][i] for p in parts]) for i in range(len(self.heads))]
        coverage = [c for p in parts for c in p[1]]
        emb = None if parts[0][2] is None else torch.cat([p[2] for p in parts])
        return (out, coverage, emb, *([[w for p in parts for w in p[3]]] if len(parts[0]) > 3 else []))

    def __getstate__(self) -> dict:  # copies (copy.deepcopy) start their own prompt threads
        return {**self.__dict__, "_pool": None}

    def close(self) -> None:
        """Stop the prompt threads (if any were started); the encoder still works after."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    @torch.inference_mode()
    def _scan_embed(self, texts: list[str]) -> tuple[list[torch.Tensor], list[float], torch.Tensor | None]:
        out, coverage, emb, windows = self._scan_main(texts)
        for i, rows in enumerate(self.window_rows(windows)):
            if rows:
                self.pick_alarming(out, i, rows)
        return out, coverage, emb

    @torch.inference_mode()
    def _scan_main(self, texts: list[str]
                   ) -> tuple[list[torch.Tensor], list[float], torch.Tensor | None, list[list[list[int]]]]:
        tiled = self.base.tile(texts, self.scan_chars)
        # The main windows run alone, as without scanning, so the other heads' inputs and
        # outputs do not depend on how long the other prompts of the batch are.
        out, emb = self._forward(*pad_batch(tiled.mains))
        windows = tiled.windows if self._scanned else [[] for _ in texts]
        return out, tiled.coverage, emb, windows

    @torch.inference_mode()
    def window_rows(self, windows: list[list[list[int]]]) -> list[list[torch.Tensor]]:
        """Per prompt, each extra window's raw outputs of the scan heads concatenated: from
        :attr:`scan_cache` where it holds the window, else from the encoder (in chunks of
        :data:`SCAN_CHUNK` rows, bounding memory), then stored there."""
        keys = [[window_key(w) for w in ws] for ws in windows]
        known: dict[bytes, torch.Tensor] = {}
        todo: dict[bytes, list[int]] = {}
        for ws, ks in zip(windows, keys):
            for w, k in zip(ws, ks):
                if k not in known and k not in todo:
                    hit = self.scan_cache.get(k)
                    if hit is None:
                        todo[k] = w
                    else:
                        known[k] = hit
        pending = list(todo.items())
        for a in range(0, len(pending), SCAN_CHUNK):
            chunk = pending[a:a + SCAN_CHUNK]
            raw, _ = self._forward(*pad_batch([w for _, w in chunk]))
            for r, (k, _) in enumerate(chunk):
                known[k] = row = torch.cat([raw[j][r] for j in self._scanned])
                self.scan_cache.put(k, row)
        return [[known[k] for k in ks] for ks in keys]

    def pick_alarming(self, out: list[torch.Tensor], i: int, rows: list[torch.Tensor]) -> None:
        """Set prompt ``i``'s output of each scan head, per output, to its most alarming
        (highest post-processed) value over the main window and the extra ``rows``
        (:meth:`window_rows`; ``out`` as :meth:`scan_main` returns it, changed in place)."""
        at = 0
        for j in self._scanned:
            width = out[j].shape[1]
            cand = torch.stack([out[j][i], *(r[at:at + width] for r in rows)])
            at += width
            post = postprocess(self.heads[j].config, cand)
            out[j][i] = cand.gather(0, post.argmax(0, keepdim=True)).squeeze(0)

    def _forward(self, ids: torch.Tensor, mask: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor | None]:
        ids, mask = ids.to(self.device), mask.to(self.device)
        x = self.base.trunk(ids, mask, self.split)
        self.trunk_calls += 1
        bias = attention_bias(mask, x.dtype)
        lengths = real_lengths(mask)
        if self.pooler is not None:  # the top is one layer with LoRA on its output map only
            maxed = [j for j, h in enumerate(self.heads) if h.config.pooling == "max"]
            mean, top = self.pooler(x, bias, mask, maxed, lengths,
                                    qkv=with_lengths(self.base.fused_qkv(self.split), lengths))
            pooled = {"mean": mean}
            if top is not None:
                pooled["max"] = torch.zeros_like(mean).index_copy_(0, torch.tensor(maxed, device=mean.device), top)
            return self._outputs(pooled, mean[-1] if self.embed else None)
        for i, lin in enumerate(self.top, start=self.split):
            fused = None if any(m in lin.lora for m in LINEARS[:3]) else with_lengths(self.base.fused_qkv(i), lengths)
            x = bert_layer(x, bias, lin.lw, self.base.n_attn_heads, partial(lin, lengths=lengths), self.base.eps,
                           qkv=fused)
        pooled = {kind: POOLING[kind](x, mask).float() for kind in {h.config.pooling for h in self.heads}}
        emb = None
        if self.embed:
            base = x if x.dim() == 3 else x[-1]  # no head adapted the top: x is the base's
            emb = POOLING["mean"](base, mask).float()
        return self._outputs(pooled, emb)

    def _outputs(self, pooled: dict[str, torch.Tensor], emb: torch.Tensor | None
                 ) -> tuple[list[torch.Tensor], torch.Tensor | None]:
        """Output layers on the pooled states (per pooling kind ``(B, D)`` or ``(S, B, D)``)
        and the L2-normalised embedding from the mean-pooled base states ``(B, D)``."""
        out = []
        for i, (head, (w, b)) in enumerate(zip(self.heads, self.out)):
            p = pooled[head.config.pooling]
            out.append(F.linear(p if p.dim() == 2 else p[i], w, b).cpu())
        return out, (None if emb is None else F.normalize(emb, dim=-1).cpu())


def postprocess(config: Any, raw: torch.Tensor) -> torch.Tensor:
    """Head outputs from raw logits ``(B, n)``: calibrated probabilities (``multilabel``,
    ``probability``), class probabilities (``multiclass``) or tokens (``log_regression``)."""
    if config.kind == "multiclass":
        return torch.softmax(raw, dim=-1)
    if config.kind == "log_regression":
        return torch.expm1(config.target_mean + config.target_std * raw).clamp(min=0.0)
    a = torch.tensor(config.calibration.get("a", [1.0] * raw.shape[-1]), dtype=raw.dtype)
    b = torch.tensor(config.calibration.get("b", [0.0] * raw.shape[-1]), dtype=raw.dtype)
    return torch.sigmoid(a * raw + b)
