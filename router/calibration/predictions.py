"""The classifier's outputs for calibration rows: computed once, in batches, cached on disk.

A calibration sweep asks the predictor about every row once per threshold. The heads
(:class:`router.classify.predictor.ClassifierPredictor`) run once per prompt, in batches of
:data:`BATCH` through ``classify_batch``; :class:`Replayed` then serves those outputs to
the decision engine through the heads' own ``predict`` (so backend -> head label matching,
policy priors for unknown backends and the signals rules read are the gateway's, not a copy).

Disk cache: one JSON-lines file per heads version set under
``$MIXROUTE_CACHE_DIR/calibration/`` (default ``~/.cache/mixroute``), one line
``{"key": sha256(prompt), "out": {...}}`` per prompt.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson

#: Prompts per encoder pass.
BATCH = 64

Progress = Callable[[int, int], None]


def _key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def cache_path(heads: Any) -> Path:
    """The cache file of ``heads``: named after its heads' ``name@version`` list and, when
    the quality head is blended with an outcome memory, that memory's file digest and
    settings (``k``, ``kappa``, ``task_smoothing``, ``exclude_exact``), so a rebuilt memory or another memory
    setting never reads outputs blended under the old one."""
    from router.eval.embed import cache_dir

    tag = ",".join(sorted(f"{n}@{c.version}" for n, c in heads.heads.items()))
    memory = getattr(heads, "memory", None)
    if memory is not None:
        smoothing = getattr(memory, "smoothing_in_force", 0.0)  # not in the tag at 0: older caches stay valid
        tag += (f";memory={memory.digest or memory.n},k={memory.k},kappa={memory.kappa},"
                + (f"smoothing={smoothing}," if smoothing else "")
                + f"exclude_exact={bool(getattr(heads, 'exclude_exact', False))},quality_n")
    return cache_dir() / "calibration" / f"heads-{hashlib.sha256(tag.encode()).hexdigest()[:16]}.jsonl"


def precompute(heads: Any, texts: Sequence[str], *, cache: Path | None = None,
               progress: Progress | None = None) -> dict[str, dict[str, Any]]:
    """Every head's outputs per distinct text (``heads.classify_batch``), reading and
    extending the JSON-lines ``cache`` when given.

    Returns:
        text -> the outputs ``classify_batch`` gives for it.
    """
    stored: dict[str, dict[str, Any]] = {}
    if cache is not None and cache.is_file():
        for line in cache.read_bytes().splitlines():
            try:
                rec = orjson.loads(line)
                stored[rec["key"]] = rec["out"]
            except (orjson.JSONDecodeError, KeyError, TypeError):
                continue  # a torn last line from an interrupted run
    out: dict[str, dict[str, Any]] = {}
    todo = []
    for t in dict.fromkeys(texts):
        hit = stored.get(_key(t))
        if hit is not None:
            out[t] = hit
        else:
            todo.append(t)
    fh = None
    if cache is not None and todo:
        cache.parent.mkdir(parents=True, exist_ok=True)
        fh = cache.open("ab")
    try:
        for s in range(0, len(todo), BATCH):
            chunk = todo[s:s + BATCH]
            for t, o in zip(chunk, heads.classify_batch(chunk)):
                out[t] = o
                if fh is not None:
                    fh.write(orjson.dumps({"key": _key(t), "out": o}) + b"\n")
            if progress:
                progress(min(s + BATCH, len(todo)), len(todo))
    finally:
        if fh is not None:
            fh.close()
    return out


class Replayed:
    """A :class:`router.predict.Predictor` answering from precomputed head outputs.

    It points the heads' ``signals`` (the one place ``ClassifierPredictor.predict`` reads
    encoder outputs from) at the precomputed table, then delegates ``predict`` to the
    heads. A text not in the table is classified on the spot and added.

    Args:
        heads: a loaded ``ClassifierPredictor`` (its micro-batching thread is not used).
        outputs: text -> outputs, from :func:`precompute`.
    """

    def __init__(self, heads: Any, outputs: dict[str, dict[str, Any]]):
        self.heads = heads
        self.outputs = outputs
        heads.signals = self._signals

    async def _signals(self, text: str) -> dict[str, Any]:
        out = self.outputs.get(text)
        if out is None:
            out = self.outputs[text] = self.heads.classify_batch([text])[0]
        return out

    async def predict(self, text: str, backends: Sequence[Any]):
        return await self.heads.predict(text, backends)
