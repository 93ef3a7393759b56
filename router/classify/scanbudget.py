"""Fit long-prompt scanning to a latency budget on this machine.

Each extra scan window of a long prompt is one more encoder row (docs/CLASSIFIER.md,
"Long-prompt scanning"), so a 100,000-character prompt costs ``1 + scan_windows`` rows, and
that time varies several-fold between CPUs (with and without int8 dot-product instructions;
docs/CLASSIFIER.md). :func:`fit_scan_windows` measures that worst case once, at start,
and lowers the window count until it fits the budget; what a prompt's scan did not read is
reported per request in ``signals["scan_coverage"]``.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass

#: Characters of the synthetic worst-case prompt (the issue's 100,000-character bound).
LONG_PROMPT_CHARS = 100_000


@dataclass(frozen=True)
class ScanFit:
    """What :func:`fit_scan_windows` decided.

    Attributes:
        windows: extra windows the encoder now reads per long prompt.
        wanted: the window count it started from.
        full_ms: measured time of one long prompt with ``wanted`` windows (ms).
        expected_ms: expected time with ``windows`` (ms; the measurement when unchanged).
    """

    windows: int
    wanted: int
    full_ms: float
    expected_ms: float

    @property
    def reduced(self) -> bool:
        return self.windows < self.wanted


def long_prompt(chars: int = LONG_PROMPT_CHARS, seed: int = 0) -> str:
    """A deterministic English-like prompt of ``chars`` characters (words of 3-9 letters)."""
    rng = random.Random(seed)
    words = ["".join(rng.choice("etaoinshrdlucmfwyp") for _ in range(rng.randint(3, 9))) for _ in range(500)]
    out, n = [], 0
    while n <= chars:
        word = rng.choice(words)
        out.append(word)
        n += len(word) + 1
    return " ".join(out)[:chars]


def fit_scan_windows(predictor, budget_ms: float, *, repeats: int = 2, clock=time.perf_counter) -> ScanFit:
    """Lower ``predictor.encoder.scan_windows`` until one :data:`LONG_PROMPT_CHARS`-character
    prompt classifies within ``budget_ms`` on this machine (blocking; run before serving).

    Times ``predictor.classify_batch`` on :func:`long_prompt` with the current ``wanted``
    windows: a warm-up, then one timed run, and up to ``repeats - 1`` more while the best is
    over budget (noise only adds time). Such a prompt is ``1 + wanted`` encoder rows of the
    same length, so one row costs ``t / (1 + wanted)`` and ``floor(budget / row) - 1`` windows
    fit (at least 0, at most ``wanted``).

    Args:
        predictor: a :class:`router.classify.predictor.ClassifierPredictor`.
        budget_ms: the time one long prompt may take (ms); ``<= 0`` measures nothing and keeps
            the windows.
        repeats: most timed runs (at least 1).
        clock: seconds, monotonic (tests pass their own).

    Returns:
        What was decided (:class:`ScanFit`).
    """
    encoder = predictor.encoder
    wanted = int(encoder.scan_windows)
    if budget_ms <= 0 or wanted == 0:
        return ScanFit(wanted, wanted, math.nan, math.nan)
    text = long_prompt()
    predictor.classify_batch([text])  # warm-up for this shape
    best = math.inf
    for _ in range(max(1, repeats)):
        t0 = clock()
        predictor.classify_batch([text])
        best = min(best, (clock() - t0) * 1e3)
        if best <= budget_ms:
            return ScanFit(wanted, wanted, best, best)
    row = best / (1 + wanted)
    windows = max(0, min(wanted, math.floor(budget_ms / row) - 1))
    encoder.scan_windows = windows
    return ScanFit(windows, wanted, best, row * (1 + windows))
