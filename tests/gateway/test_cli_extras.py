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


@pytest.fixture
def no_safetensors(monkeypatch):
    """The classifier extra's safetensors not installed (``None`` in sys.modules: an import
    of it fails and find_spec finds nothing)."""
    import sys

    monkeypatch.setitem(sys.modules, "safetensors", None)


HINT = "safetensors not installed: pip install torch==2.13.0 'mixroute[classifier]'"


def test_calibrate_without_the_classifier_extra_says_how_to_install_it(no_safetensors, tmp_path):
    """From a fresh-user pass: "no usable heads: No module named 'safetensors'", no hint."""
    from tests.calibrate.conftest import write_nested

    data = write_nested(tmp_path / "nested.csv", n=60)
    res = CliRunner().invoke(app, ["calibrate", "--data", str(data), "--resamples", "100"])
    assert res.exit_code == 2, res.output
    assert f"mixroute calibrate: no usable heads: {HINT}" in res.stderr, res.stderr
    assert "-e '.[classifier]'" in res.stderr and "Traceback" not in res.output


def test_eval_mixroute_without_the_classifier_extra_says_how_to_install_it(no_safetensors, tmp_path):
    from tests.eval.conftest import write_tiny

    data = write_tiny(tmp_path / "tiny.csv", n=30)
    res = CliRunner().invoke(app, ["eval", "--test", str(data), "--router", "mixroute", "--router", "zero",
                                   "--bootstrap", "0", "--json", str(tmp_path / "r.json")])
    assert res.exit_code == 1, res.output  # the other routers' rows are written; the run says one failed
    assert f"error: could not run mixroute: no usable heads: {HINT}" in res.output, res.output
