"""``ClassifierPredictor``: the :class:`router.predict.Predictor` backed by the heads.

Per prompt, one micro-batched encoder pass yields every head's output; they become a
:class:`~router.predict.Prediction`:

- ``quality[backend]``: the calibrated ``quality`` head output (blended with the outcome
  memory's nearest training prompts when one is loaded, :mod:`router.classify.memory`) for the backend's
  ``quality_model`` (or ``model``), matched exactly, then case-insensitively, then by the
  last ``/`` segment (``openai/gpt-4-1106-preview`` -> ``gpt-4-1106-preview``). A backend
  the head does not know keeps its policy ``quality`` prior (or
  :data:`~router.predict.UNKNOWN_QUALITY`) and is listed in ``signals["quality_prior_for"]``.
- ``quality_sd[backend]``: with an outcome memory, the posterior standard deviation of that
  quality, ``sqrt(q (1 - q) / (n + 1))`` with ``n`` = the memory's ``kappa`` plus the
  neighbours with a recorded score (:func:`router.neighbours.posterior_sd`); a
  ``route_target`` bar holds its share on ``q - uncertainty_z x sd``. Absent without a
  memory and for backends on their prior.
- ``output_tokens``: the ``output_length`` head (tokens), else the default.
- ``signals``: ``domain`` (+ ``domain_confidence``), ``difficulty``, ``pii``, ``injection``
  as far as those heads are loaded (``pii``/``injection``: the most alarming window of a
  long prompt), ``scan_coverage`` (share of the prompt's characters some window read; 1.0
  for prompts within one window), ``quality_memory`` (rows of the outcome memory the
  quality was blended with, when one is loaded) and ``classifier_heads`` (name@version).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from backends.config import BackendConfig
from router.classify.batching import MicroBatcher
from router.classify.labels import label_lookup, match_label
from router.neighbours import posterior_sd
from router.predict import DEFAULT_OUTPUT_TOKENS, UNKNOWN_QUALITY, Prediction


class ClassifierPredictor:
    """Predictor over a :class:`router.classify.runtime.MultiHeadEncoder`.

    Args:
        encoder: the loaded multi-head encoder.
        max_batch: largest micro-batch (prompts per encoder pass).
        max_wait_ms: longest a prompt waits for its micro-batch to fill (ms).
        memory: an :class:`router.classify.memory.OutcomeMemory` over the quality head's
            labels (the encoder must have been built with ``embed=True``), or ``None``.
        exclude_exact: ignore memory rows identical to the prompt (see
            :meth:`router.classify.memory.OutcomeMemory.neighbours`).

    Raises:
        ValueError: a memory without a ``quality`` head, or whose labels differ from it.
    """

    source = "classifier"

    def __init__(self, encoder: Any, *, max_batch: int = 32, max_wait_ms: float = 0.0, memory: Any = None,
                 exclude_exact: bool = False):
        self.encoder = encoder
        self.memory, self.exclude_exact = memory, exclude_exact
        # Two lanes: the main windows of every prompt, and the extra windows of long prompts
        # (router/classify/scan.py), so a short prompt never waits behind a long one's scan.
        split = all(hasattr(encoder, m) for m in ("scan_main", "window_rows", "pick_alarming"))
        self.batcher = MicroBatcher(self._main_batch if split else self.classify_batch, max_batch=max_batch,
                                    max_wait_ms=max_wait_ms)
        self.scan_lane = MicroBatcher(encoder.window_rows, max_batch=max_batch) if split else None
        self.heads = {h.name: h.config for h in encoder.heads}
        quality = self.heads.get("quality")
        if memory is not None and (quality is None or list(memory.labels) != list(quality.labels)
                                   or not getattr(encoder, "embed", False)):
            raise ValueError("the outcome memory needs the quality head it was built for (same labels) "
                             "and an encoder built with embed=True")
        self._models = {} if quality is None else label_lookup(quality.labels)
        self.quality_labels: list[str] = [] if quality is None else list(quality.labels)

    def classify_batch(self, texts: list[str]) -> list[dict[str, Any]]:
        """Every head's post-processed outputs per text (runs the encoder; blocking)."""
        return self.classify_batch_embed(texts)[0]

    def classify_batch_embed(self, texts: list[str]) -> tuple[list[dict[str, Any]], Any]:
        """:meth:`classify_batch` plus the prompts' base embeddings ``(B, D)`` float32 tensor
        (``None`` unless the encoder was built with ``embed=True``)."""
        raw, coverage, emb = self.encoder.scan_embed(texts)
        return self._dicts(raw, coverage, emb), emb

    def _dicts(self, raw: list[Any], coverage: list[float], emb: Any) -> list[dict[str, Any]]:
        """Per prompt, every head's post-processed outputs (quality blended with the memory)."""
        import torch

        from router.classify.runtime import postprocess

        per_head = {h.name: postprocess(h.config, r) for h, r in zip(self.encoder.heads, raw)}
        counts = None
        if self.memory is not None:
            blended, counts = self.memory.blend(per_head["quality"].numpy(), emb.numpy(),
                                                exclude_exact=self.exclude_exact, with_n=True)
            per_head["quality"] = torch.from_numpy(blended)
        out: list[dict[str, Any]] = []
        for i in range(len(coverage)):
            d: dict[str, Any] = {}
            for name, values in per_head.items():
                d.update(self._entries(name, values[i].tolist()))
            d["scan_coverage"] = coverage[i]
            if self.memory is not None:
                d["quality_memory"] = self.memory.n
                d["quality_n"] = dict(zip(self.memory.labels, counts[i].tolist()))
            out.append(d)
        return out

    def _entries(self, name: str, row: list[float]) -> dict[str, Any]:
        """One head's signal entries from its post-processed outputs for one prompt."""
        cfg = self.heads[name]
        if cfg.kind == "multilabel":
            return {name: dict(zip(cfg.labels, row))}
        if cfg.kind == "multiclass":
            k = max(range(len(row)), key=row.__getitem__)
            return {name: cfg.labels[k], name + "_confidence": row[k]}
        return {name: row[0]}

    def _main_batch(self, texts: list[str]) -> list[tuple[dict[str, Any], list[Any], list[list[int]]]]:
        """The main lane: per prompt, its signals from the main window, its raw outputs and
        its extra windows (the scan lane's work; empty for a prompt within one window)."""
        raw, coverage, emb, windows = self.encoder.scan_main(texts)
        dicts = self._dicts(raw, coverage, emb)
        return [(d, [r[i:i + 1].clone() for r in raw], w) for i, (d, w) in enumerate(zip(dicts, windows))]

    def _with_windows(self, signals: dict[str, Any], raw: list[Any], rows: list[Any]) -> dict[str, Any]:
        """``signals`` with the scan heads' entries read over the extra windows' ``rows`` too."""
        from router.classify.runtime import postprocess

        self.encoder.pick_alarming(raw, 0, rows)
        out = dict(signals)
        for head, r in zip(self.encoder.heads, raw):
            if head.name in self.encoder.scan_heads:
                out.update(self._entries(head.name, postprocess(head.config, r)[0].tolist()))
        return out

    async def signals(self, text: str) -> dict[str, Any]:
        """All head outputs for one prompt (micro-batched with concurrent calls): the main
        window in the main lane, then a long prompt's extra windows in the scan lane, so that
        prompts queued behind it in the main lane do not wait for its scan."""
        if self.scan_lane is None:
            return await self.batcher.submit(text)
        signals, raw, windows = await self.batcher.submit(text)
        if not windows:
            return signals
        return self._with_windows(signals, raw, await self.scan_lane.submit(windows))

    def head_model(self, backend: BackendConfig) -> str | None:
        """The ``quality`` label standing for ``backend``, or ``None`` if unknown."""
        return match_label(self._models, backend.quality_model or backend.model)

    async def predict(self, text: str, backends: Sequence[BackendConfig]) -> Prediction:
        out = await self.signals(text)
        head_quality: dict[str, float] = out.get("quality", {})
        counts: dict[str, float] = out.get("quality_n") or {}
        quality, sd, prior_for = {}, {}, []
        for b in backends:
            label = self.head_model(b)
            if label is not None and label in head_quality:
                quality[b.name] = round(float(head_quality[label]), 4)
                if label in counts:
                    sd[b.name] = round(float(posterior_sd(quality[b.name], counts[label])), 4)
            else:
                quality[b.name] = b.quality if b.quality is not None else UNKNOWN_QUALITY
                prior_for.append(b.name)
        signals: dict[str, Any] = {k: (round(v, 4) if isinstance(v, float) else v)
                                   for k, v in out.items() if k not in ("quality", "output_length", "quality_n")}
        if prior_for:
            signals["quality_prior_for"] = prior_for
        signals["classifier_heads"] = [f"{n}@{c.version}" for n, c in self.heads.items()]
        tokens = out.get("output_length")
        return Prediction(quality=quality, quality_sd=sd,
                          output_tokens=max(1, int(round(tokens))) if tokens is not None else DEFAULT_OUTPUT_TOKENS,
                          signals=signals, source=self.source)

    def close(self) -> None:
        """Stop the batching worker (waits for the batch in flight), then the encoder's prompt threads."""
        self.batcher.close()
        if self.scan_lane is not None:
            self.scan_lane.close()
        close = getattr(self.encoder, "close", None)
        if close is not None:
            close()
