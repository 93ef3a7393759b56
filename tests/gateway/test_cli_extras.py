"""Commands that need an optional extra say which one, in one line, when it is missing."""

from __future__ import annotations

import importlib.util

import pytest
from typer.testing import CliRunner

from gateway.cli import app


@pytest.fixture
def no_numpy(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "numpy" else real(name, *a))


@pytest.mark.parametrize("args, command", [
    (["eval", "--test", "data.csv"], "mixroute eval"),
    (["policy", "what-if", "policy.yaml"], "mixroute policy what-if"),
    (["calibrate", "--data", "data.csv"], "mixroute calibrate"),
])
def test_a_missing_numpy_names_the_eval_extra(no_numpy, args, command):
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 1, res.output
    assert f"error: {command} needs the eval extra (no module named 'numpy'); pip install 'mixroute[eval]'" \
        in res.output
    assert "Traceback" not in res.output
