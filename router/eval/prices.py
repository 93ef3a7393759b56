"""``mixroute eval --prices``: a price file read (with repeated names warned about), and the
entries that price nothing in the evaluated data found (:func:`unused_prices`). The prices
replace the price list's for data that records no cost (:func:`router.eval.data.load_eval_data`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from router.eval.data import EvalData
from router.eval.errors import EvalDataError


def read_prices(path: Path, warn: Callable[[str], None] | None = None) -> dict[str, float]:
    """``--prices``: a YAML or JSON mapping of model name -> USD per 1M tokens.

    A model named more than once (YAML and JSON keep the last value; ``1`` and ``"1"`` are
    one name) keeps its last price, and ``warn`` gets one line per such name saying so.

    Raises:
        EvalDataError: unreadable, not a mapping, or a price that is not a number >= 0.
    """
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
        doc = yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise EvalDataError(path, f"cannot read prices: {exc}") from None
    if not isinstance(doc, dict):
        raise EvalDataError(path, "prices must be a mapping of model name -> USD per 1M tokens")
    out = {}
    for model, price in doc.items():
        if isinstance(price, bool) or not isinstance(price, (int, float)) or price < 0 or not math.isfinite(price):
            raise EvalDataError(path, f"price of {model!r} is {price!r}, not a number >= 0 (USD per 1M tokens)")
        out[str(model)] = float(price)
    if warn is not None:
        for name, given in _repeated_keys(text).items():
            warn(f"{name!r} is given {len(given)} times ({', '.join(given)}); the last price, {out[name]:g}, is used")
    return out


def _repeated_keys(text: str) -> dict[str, list[str]]:
    """Name -> the values written for it, for each key of the top-level YAML/JSON mapping in
    ``text`` that occurs more than once (compared as :func:`read_prices` names models:
    ``str`` of the key). A merge key (``<<``) is not a repetition."""
    import yaml

    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if not isinstance(node, yaml.MappingNode):
            return {}
        given: dict[str, list[str]] = {}
        for key, value in node.value:
            if key.tag == "tag:yaml.org,2002:merge":
                continue
            shown = value.value if isinstance(value, yaml.ScalarNode) else "..."
            given.setdefault(str(loader.construct_object(key, deep=True)), []).append(shown)
    except (yaml.YAMLError, TypeError, ValueError):  # read_prices has already read it as a mapping
        return {}
    finally:
        loader.dispose()
    return {k: v for k, v in given.items() if len(v) > 1}


def unused_prices(prices_per_1m: dict[str, float], datasets: list[EvalData]) -> list[str]:
    """One line per ``--prices`` entry that prices nothing in ``datasets``: a name that is no
    model of the data (with the models it may have meant: those containing it or contained
    in it, letters and digits compared, or close spellings; else every model), or a model
    whose every dataset records its costs (recorded costs are kept)."""
    import difflib

    models = sorted({m for d in datasets for m in d.models})
    repriced = {m for d in datasets if d.price_source != "recorded" for m in d.models}
    out = []
    for name in prices_per_1m:
        if name in repriced:
            continue
        if name in models:
            out.append(f"{name!r} is not used: the data with this model records its costs per call")
            continue
        key = _letters(name)
        near = [m for m in models if key and (key in _letters(m) or _letters(m) in key)] \
            or difflib.get_close_matches(name, models, n=3, cutoff=0.5)
        hint = f"did you mean {' or '.join(map(repr, near))}?" if near else f"its models: {', '.join(models)}"
        out.append(f"{name!r} matches no model in the data, so it is not used; {hint}")
    return out


def _letters(name: str) -> str:
    """``"GPT-4o mini"`` -> ``"gpt4omini"``: a model name for loose comparison."""
    return "".join(ch for ch in name.lower() if ch.isalnum())
