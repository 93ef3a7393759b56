"""Head artifacts: one folder per head under ``adapters/`` with the same files each time.

::

    adapters/<head>/
      config.json                 HeadConfig (kind, labels, LoRA placement, calibration, metrics)
      adapter_config.json         the peft LoraConfig it was trained with
      adapter_model.safetensors   the LoRA weights, peft key names (top layer(s) only)
      head.safetensors            the output layer: ``weight (n_out, D)``, ``bias (n_out,)``
      MODEL_CARD.md               data, split, metrics, date

:func:`load_head` validates a folder and returns a :class:`Head` with the LoRA deltas
unpacked per ``(layer, module)`` and the LoRA scaling folded into ``B``.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from router.classify.errors import AdapterError

HEAD_FILES = ("config.json", "adapter_config.json", "adapter_model.safetensors", "head.safetensors")
_LORA_KEY = re.compile(r"encoder\.layer\.(\d+)\.(.+)\.lora_([AB])(?:\.default)?\.weight$")


class LoraPlacement(BaseModel):
    """Where a head's LoRA sits: ``layers`` x ``modules`` (Hugging Face BERT names)."""

    model_config = ConfigDict(extra="forbid")
    layers: list[int]
    modules: list[str]
    r: int = Field(gt=0)
    alpha: float = Field(gt=0)


class HeadConfig(BaseModel):
    """``config.json`` of a head.

    Attributes:
        kind: ``multilabel`` (one sigmoid per label, e.g. quality per model),
            ``multiclass`` (softmax, e.g. domain), ``probability`` (one sigmoid, e.g.
            difficulty, pii) or ``log_regression`` (``exp(mean + std * y) - 1``, e.g.
            output tokens).
        labels: output names, in order.
        max_tokens, head_tokens: tokenisation budget (see :func:`router.classify.text.head_tail`).
        calibration: per-label Platt parameters ``sigmoid(a * logit + b)`` fitted on the
            calibration split (``multilabel`` / ``probability``).
        target_mean, target_std: de-standardisation of ``log_regression`` outputs.
        pooling: ``mean`` (default) or ``max`` over the top layer's real tokens.
    """

    model_config = ConfigDict(extra="forbid")
    name: str
    version: int = 1
    kind: Literal["multilabel", "multiclass", "probability", "log_regression"]
    labels: list[str]
    base_model: str
    max_tokens: int = Field(gt=2)
    head_tokens: int = Field(ge=0)
    lora: LoraPlacement
    pooling: Literal["mean", "max"] = "mean"
    calibration: dict[str, list[float]] = Field(default_factory=dict)
    target_mean: float = 0.0
    target_std: float = 1.0
    seed: int = 0
    trained_at: str = ""
    data: dict[str, Any] = Field(default_factory=dict)
    metrics: dict[str, Any] = Field(default_factory=dict)


@dataclass
class Head:
    """A loaded head: config, LoRA deltas ``(layer, module) -> (A (r, in), B (out, r))``
    with ``B`` pre-scaled, and the output layer."""

    config: HeadConfig
    lora: dict[tuple[int, str], tuple[Any, Any]] = field(default_factory=dict)
    out_weight: Any = None
    out_bias: Any = None

    @property
    def name(self) -> str:
        return self.config.name


def load_head(folder: Path) -> Head:
    """Load and validate one head folder.

    Raises:
        AdapterError: a file is missing, unreadable, or the shapes disagree with the config.
    """
    from safetensors.torch import load_file

    missing = [f for f in HEAD_FILES if not (folder / f).is_file()]
    if missing:
        raise AdapterError(f"adapter {folder}: missing {', '.join(missing)}")
    try:
        config = HeadConfig.model_validate_json((folder / "config.json").read_text(encoding="utf-8"))
        peft_cfg = json.loads((folder / "adapter_config.json").read_text(encoding="utf-8"))
        lora_state = load_file(str(folder / "adapter_model.safetensors"))
        out = load_file(str(folder / "head.safetensors"))
    except Exception as exc:  # pydantic, json or safetensors errors: one message for all
        raise AdapterError(f"adapter {folder}: cannot read ({exc})") from exc
    scaling = float(peft_cfg.get("lora_alpha", config.lora.alpha)) / float(peft_cfg.get("r", config.lora.r))
    parts: dict[tuple[int, str], dict[str, Any]] = {}
    for key, tensor in lora_state.items():
        m = _LORA_KEY.search(key)
        if m is None:
            raise AdapterError(f"adapter {folder}: unexpected LoRA key {key!r}")
        parts.setdefault((int(m.group(1)), m.group(2)), {})[m.group(3)] = tensor.float()
    head = Head(config, out_weight=out["weight"].float(), out_bias=out["bias"].float())
    for where, ab in parts.items():
        if set(ab) != {"A", "B"}:
            raise AdapterError(f"adapter {folder}: LoRA {where} lacks A or B")
        head.lora[where] = (ab["A"], ab["B"] * scaling)
    if tuple(head.out_weight.shape[:1]) != (len(config.labels),):
        raise AdapterError(f"adapter {folder}: output layer has {head.out_weight.shape[0]} rows, "
                           f"config has {len(config.labels)} labels")
    return head


def discover(adapters_dir: Path, names: list[str] | None = None) -> list[Path]:
    """Head folders under ``adapters_dir`` (those holding a ``config.json``), sorted by name."""
    if names is not None:
        return [adapters_dir / n for n in names]
    return sorted(p for p in adapters_dir.iterdir() if (p / "config.json").is_file())


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, x))))


def save_head(folder: Path, config: HeadConfig, model: Any) -> None:
    """Write the head's artifacts (the files :func:`load_head` reads) from a trained
    :class:`router.classify.trainable.Trainable` (its ``peft``, ``out`` and ``lora_config``)."""
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    lora = {k: v.detach().contiguous() for k, v in get_peft_model_state_dict(model.peft).items()}
    save_file(lora, str(folder / "adapter_model.safetensors"))
    save_file({"weight": model.out.weight.detach().contiguous(), "bias": model.out.bias.detach().contiguous()},
              str(folder / "head.safetensors"))
    pc = model.lora_config.to_dict()
    pc["base_model_name_or_path"] = config.base_model
    (folder / "adapter_config.json").write_text(json.dumps(pc, indent=2, sort_keys=True, default=_json) + "\n")
    (folder / "config.json").write_text(config.model_dump_json(indent=2) + "\n")
    (folder / "MODEL_CARD.md").write_text(model_card(config))


def _json(o):
    return sorted(o) if isinstance(o, (set, frozenset)) else str(o)


def model_card(c: HeadConfig) -> str:
    from router.classify.targets import SPECS

    description = SPECS[c.name].description if c.name in SPECS else c.name
    return f"""# `{c.name}` head (v{c.version})

{description}. Kind `{c.kind}`, {len(c.labels)} output(s).

- Base: `{c.base_model}` (frozen), LoRA r={c.lora.r} alpha={c.lora.alpha} on
  `encoder.layer.{c.lora.layers}` modules `{c.lora.modules}`; linear output layer on {c.pooling}-pooled tokens.
- Input: first {c.head_tokens} + last {c.max_tokens - 2 - c.head_tokens} tokens of the prompt.
- Data: `../shared/data` ({', '.join(c.data.get('sources', []))}); rows {c.data.get('rows')}.
- Split: {c.data.get('split')}. Test rows are never used for fitting or calibration.
- Training: {c.data.get('epochs')} epochs, batch {c.data.get('batch_size')}, lr {c.data.get('lr')}, seed {c.seed};
  {c.data.get('machine')}. Trained {c.trained_at}.
- Calibration: {'Platt per label on the calib split' if c.calibration else 'none'}.

## Held-out metrics (test split)

```json
{json.dumps(c.metrics, indent=2)}
```

Labels: {', '.join(f'`{x}`' for x in c.labels)}.
"""
