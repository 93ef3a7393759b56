"""Fitting long-prompt scanning to a latency budget (router/classify/scanbudget.py), with a
predictor whose cost per encoder row is known, and through the gateway's loader with the
shipped classifier."""

from __future__ import annotations

import logging
import math
from types import SimpleNamespace

import pytest

from router.classify.scanbudget import LONG_PROMPT_CHARS, fit_scan_windows, long_prompt


class RowCostPredictor:
    """Takes ``base_ms + per_window_ms * windows`` per long prompt on its own clock, and
    ``warm_ms`` more on the first call of each window count (a cold shape)."""

    def __init__(self, windows: int, base_ms: float, per_window_ms: float, warm_ms: float = 500.0):
        self.encoder = SimpleNamespace(scan_windows=windows)
        self.base_ms, self.per_window_ms, self.warm_ms = base_ms, per_window_ms, warm_ms
        self.now, self.seen, self.calls = 0.0, set(), 0

    def clock(self) -> float:
        return self.now

    def classify_batch(self, texts: list[str]) -> list[dict]:
        assert len(texts) == 1 and len(texts[0]) == LONG_PROMPT_CHARS
        w = self.encoder.scan_windows
        self.now += (self.base_ms + self.per_window_ms * w + (0 if w in self.seen else self.warm_ms)) / 1e3
        self.seen.add(w)
        self.calls += 1
        return [{}]


def test_windows_that_fit_are_kept():
    p = RowCostPredictor(8, base_ms=10, per_window_ms=8)
    fit = fit_scan_windows(p, 150, clock=p.clock)
    assert (fit.windows, fit.wanted, p.encoder.scan_windows) == (8, 8, 8) and not fit.reduced
    assert fit.full_ms == pytest.approx(74) and fit.expected_ms == pytest.approx(74)
    assert p.calls == 2  # a warm-up, then one timed run within budget


def test_windows_over_budget_are_cut_to_what_fits():
    p = RowCostPredictor(8, base_ms=35, per_window_ms=35)  # 9 rows of 35 ms: 315 ms with 8 windows
    fit = fit_scan_windows(p, 150, clock=p.clock)
    assert fit.reduced and fit.windows == p.encoder.scan_windows == 3  # 4 rows = 140 <= 150 < 5 rows
    assert fit.full_ms == pytest.approx(315) and fit.expected_ms == pytest.approx(140)
    assert p.calls == 3  # a warm-up, then the best of two (both over budget)


def test_a_budget_below_one_row_reads_no_extra_window():
    p = RowCostPredictor(8, base_ms=40, per_window_ms=40)
    assert fit_scan_windows(p, 20, clock=p.clock).windows == p.encoder.scan_windows == 0


def test_no_budget_or_no_windows_measures_nothing():
    for windows, budget in ((8, 0), (0, 150)):
        p = RowCostPredictor(windows, base_ms=1000, per_window_ms=1000)
        fit = fit_scan_windows(p, budget, clock=p.clock)
        assert fit.windows == windows and p.calls == 0 and math.isnan(fit.full_ms)


def test_long_prompt_is_deterministic_text_of_the_bound():
    text = long_prompt()
    assert len(text) == LONG_PROMPT_CHARS and text == long_prompt() and len(set(text.split())) > 100


def test_gateway_loader_applies_the_budget_unless_windows_are_set(caplog):
    """The shipped classifier through the gateway's loader: a budget no machine meets reads no
    extra window and says so; an explicit MIXROUTE_CLASSIFIER_SCAN_WINDOWS is kept as set."""
    pytest.importorskip("torch")
    from gateway.app import load_predictor
    from gateway.settings import Settings

    caplog.set_level(logging.INFO, logger="mixroute.gateway")
    tight = load_predictor(Settings(classifier="on", classifier_scan_budget_ms=0.001))
    try:
        assert tight.encoder.scan_windows == 0
        assert "long-prompt scan: 0 of 8 extra windows" in caplog.text
        assert "MIXROUTE_CLASSIFIER_SCAN_WINDOWS" in caplog.text
    finally:
        tight.close()
    caplog.clear()
    fixed = load_predictor(Settings(classifier="on", classifier_scan_windows=5, classifier_scan_budget_ms=0.001))
    try:
        assert fixed.encoder.scan_windows == 5 and "long-prompt scan" not in caplog.text
    finally:
        fixed.close()
