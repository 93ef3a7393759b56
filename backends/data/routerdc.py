"""RouterDC JSON (``[{"question": str, "scores": {model: float}, "cluster_id"?: int}, ...]``).

The ``*_train`` files hold soft targets in [0, 1], not plain accuracy. Neither answer
text nor cost is recorded. Keys other than ``question`` and ``scores`` go to ``meta``.
"""

from __future__ import annotations

from numbers import Real
from pathlib import Path

import orjson

from backends.data.types import DataFormatError, Dataset, OutcomeRow


def load_routerdc_json(path: Path) -> Dataset:
    """Load one RouterDC JSON file as a dataset named after the file stem.

    The models are the score keys of the first element; a later element missing one of
    them (or holding ``null``) is dropped (``dropped["missing_score"]``).

    Raises:
        DataFormatError: invalid JSON, not a list, or an element without a string
            ``question`` and a ``scores`` object of numbers.
    """
    try:
        items = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise DataFormatError(path, f"invalid JSON: {exc}") from None
    if not isinstance(items, list) or not items:
        raise DataFormatError(path, "RouterDC JSON must be a non-empty list of objects")
    models: list[str] = []
    rows: list[OutcomeRow] = []
    missing = 0
    for i, item in enumerate(items):
        if not (isinstance(item, dict) and isinstance(item.get("question"), str)
                and isinstance(item.get("scores"), dict)):
            raise DataFormatError(path, f"element {i}: needs a string 'question' and a 'scores' object")
        raw = item["scores"]
        if not models:
            models = list(raw)
        bad = [m for m, s in raw.items() if s is not None and (isinstance(s, bool) or not isinstance(s, Real))]
        if bad:
            raise DataFormatError(path, f"element {i}: score of {bad[0]!r} is {raw[bad[0]]!r}, not a number")
        if any(raw.get(m) is None for m in models):
            missing += 1
            continue
        rows.append(OutcomeRow(prompt=item["question"], scores={m: float(raw[m]) for m in models},
                               responses={m: None for m in models}, costs={m: None for m in models},
                               source=path.stem,
                               meta={k: v for k, v in item.items() if k not in ("question", "scores")}))
    if not models:
        raise DataFormatError(path, "the first element has no scores")
    return Dataset(name=path.stem, format="routerdc_json", models=models, rows=rows,
                   dropped={"missing_score": missing} if missing else {})
