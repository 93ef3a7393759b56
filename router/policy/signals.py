"""The classifier signals a policy rule can test (``when_signal``, ``when_signal_below``), and
the types that check a rule's signal names and thresholds (``RuleConfig`` in
:mod:`router.policy.models`)."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator

from backends.fields import Number


#: The shipped classifier's number signals (probabilities in [0, 1]) a rule can test;
#: heads added under ``adapters/`` add their own names.
NUMBER_SIGNALS = ("pii", "injection", "difficulty", "domain_confidence", "scan_coverage")
#: Signals that are labels or lists, which no threshold can test.
TEXT_SIGNALS = ("domain", "classifier_heads", "quality_prior_for", "predictor")
#: Heads whose output is not a probability (per-model qualities, a label, a token count).
_NOT_PROBABILITY_HEADS = ("quality", "domain", "output_length")


def number_signals() -> tuple[str, ...]:
    """The signal names a rule threshold can test: :data:`NUMBER_SIGNALS` plus the name of
    every other head folder under the shipped ``adapters/`` (a head you train and add
    there), whose output is a probability."""
    import adapters

    root = Path(adapters.__file__).resolve().parent
    extra = sorted(p.name for p in root.iterdir() if (p / "config.json").is_file()
                   and p.name not in NUMBER_SIGNALS and p.name not in _NOT_PROBABILITY_HEADS)
    return (*NUMBER_SIGNALS, *extra)


def _signal_name(name: str) -> str:
    if name in TEXT_SIGNALS:
        raise ValueError(f"'{name}' is not a number signal, so no threshold applies to it "
                         f"(number signals: {', '.join(NUMBER_SIGNALS)})")
    known = number_signals()
    if name not in known:
        near = [k for k in known if k.lower() == name.lower()] or \
            difflib.get_close_matches(name, known, n=1, cutoff=0.75)
        hint = f"did you mean '{near[0]}'? " if near else ""
        raise ValueError(f"unknown signal '{name}': {hint}(number signals: {', '.join(known)}; a rule on a "
                         "signal that is never produced never fires)")
    return name


def _probability(threshold: float) -> float:
    if not 0 <= threshold <= 1:
        raise ValueError(f"the threshold must be between 0 and 1 (signals are probabilities), not {threshold}")
    return threshold


#: A rule's signal name and its threshold (a number, never a boolean: YAML true/false would
#: count as 1/0): checked entry by entry, so that every bad entry of a ``when_signal`` gets
#: its own ``file:line when_signal.NAME`` line (a field validator stopped at the first).
SignalName = Annotated[str, AfterValidator(_signal_name)]
Threshold = Annotated[Number, AfterValidator(_probability)]
