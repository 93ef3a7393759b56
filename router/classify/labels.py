"""Matching backends to the ``quality`` head's labels, and advice on those it cannot match.

Numpy- and torch-free, so ``mixroute policy validate`` can use it on a plain install.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from router.predict import UNKNOWN_QUALITY


def _norm(name: str) -> str:
    return name.strip().lower()


def label_lookup(labels: Sequence[str]) -> dict[str, str]:
    """Keys a model name may match a quality label by (exact, case-insensitive, last ``/``
    segment) -> the label; the first label wins a shared key. See :func:`match_label`."""
    lookup = {m: m for m in labels}
    for m in labels:
        lookup.setdefault(_norm(m), m)
        lookup.setdefault(_norm(m.rsplit("/", 1)[-1]), m)
    return lookup


def match_label(lookup: dict[str, str], name: str) -> str | None:
    """The quality label standing for model ``name`` (exactly, then case-insensitively, then
    by its last ``/`` segment: ``openai/gpt-4-1106-preview`` -> ``gpt-4-1106-preview``), or ``None``."""
    for key in (name, _norm(name), _norm(name.rsplit("/", 1)[-1])):
        if key in lookup:
            return lookup[key]
    return None


def quality_notes(policy: Any, labels: Sequence[str]) -> list[str]:
    """Advice on the chat backends of ``policy``'s routes that the ``quality`` head (``labels``)
    cannot predict for, so that every prompt gets one fixed quality for them: a
    ``quality_model`` that matches none of the labels (a typo turns per-prompt prediction
    off for that backend, silently), or a backend whose ``model`` matches none and that has
    no ``quality`` prior (it is predicted :data:`~router.predict.UNKNOWN_QUALITY` on every
    prompt). None without labels (no quality head to match)."""
    if not labels:
        return []
    lookup = label_lookup(labels)
    routed = {n for r in policy.routes for n in r.backends}
    notes = []
    for b in policy.backends:
        if b.name not in routed or b.task == "embedding" or match_label(lookup, b.quality_model or b.model) is not None:
            continue
        prior = f"its prior quality {b.quality}" if b.quality is not None else f"the unknown prior {UNKNOWN_QUALITY}"
        if b.quality_model is not None:
            notes.append(f"backend '{b.name}': quality_model '{b.quality_model}' is not a model the quality head knows, "
                         f"so every prompt gets {prior} for it (known: {', '.join(labels)})")
        elif b.quality is None:
            notes.append(f"backend '{b.name}': the quality head does not know model '{b.model}' and it has no "
                         f"'quality' prior, so every prompt gets {prior} for it; set 'quality' or 'quality_model' "
                         "(one of the models in adapters/quality/config.json)")
    return notes


def shipped_quality_labels() -> list[str]:
    """The labels of the shipped ``quality`` head (``adapters/quality/config.json``; no torch
    needed), or ``[]`` when it is not there."""
    import json

    from router.classify import default_adapters_dir

    try:
        return list(json.loads((default_adapters_dir() / "quality" / "config.json").read_text())["labels"])
    except (OSError, ValueError, KeyError, TypeError):
        return []
