"""deploy/helm/mixroute with the real ``helm`` binary: lint, template, bad values, and the
same objects as :mod:`tests.deploy.gotemplate` renders.

helm comes from ``python -m tests.deploy.install_helm`` (run by ``.ci/run``); without it
these tests skip and the chart is covered by the Python renderer alone (test_chart.py).
``MIXROUTE_HELM`` names another binary.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.deploy.conftest import CHART, chart_values, ci_values, manifests
from tests.deploy.gotemplate import render_chart
from tests.deploy.test_chart import BAD_VALUES, EXPECTED, VALID


def _find_helm() -> str | None:
    if os.environ.get("MIXROUTE_HELM"):
        return os.environ["MIXROUTE_HELM"]
    beside = Path(sys.executable).parent / "helm"
    return str(beside) if beside.is_file() else shutil.which("helm")


HELM = _find_helm()
pytestmark = pytest.mark.skipif(HELM is None, reason="no helm binary: python -m tests.deploy.install_helm")
CI_VALUES = CHART / "ci" / "test-values.yaml"


def helm(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([HELM, *args], capture_output=True, text=True, timeout=120)


def values_file(tmp_path: Path, *overrides: dict) -> list[str]:
    """``-f`` arguments, one file per override, applied in order."""
    args = []
    for i, o in enumerate(overrides):
        f = tmp_path / f"values-{i}.yaml"
        f.write_text(yaml.safe_dump(o))
        args += ["-f", str(f)]
    return args


def template(*args: str) -> list[dict]:
    out = helm("template", "mixroute", str(CHART), "--namespace", "llm", *args)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def by_key(objects: list[dict]) -> dict[tuple[str, str], dict]:
    keyed = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    assert len(keyed) == len(objects), "duplicate kind/name"
    return keyed


def test_helm_lint_strict_with_ci_values():
    out = helm("lint", "--strict", str(CHART), "-f", str(CI_VALUES))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 chart(s) failed" in out.stdout


def test_helm_template_with_ci_values_renders_every_expected_object():
    got = sorted(by_key(template("-f", str(CI_VALUES))))
    assert got == sorted(obj for objs in EXPECTED.values() for obj in objs)


def test_helm_and_the_python_renderer_agree_on_the_ci_values():
    ours = [o for objs in manifests(render_chart(CHART, chart_values(ci_values()), release="mixroute",
                                                 namespace="llm")).values() for o in objs]
    assert by_key(template("-f", str(CI_VALUES))) == by_key(ours)


def test_helm_and_the_python_renderer_agree_with_optional_objects_off(tmp_path):
    off = {"autoscaling": {"enabled": False}, "serviceMonitor": {"enabled": False},
           "podDisruptionBudget": {"enabled": False}, "migrations": {"enabled": False},
           "policy": {"existingConfigMap": "my-policy"}}
    ours = [o for objs in manifests(render_chart(CHART, chart_values(VALID, off), release="mixroute",
                                                 namespace="llm")).values() for o in objs]
    assert by_key(template(*values_file(tmp_path, VALID, off))) == by_key(ours)


@pytest.mark.parametrize(("missing", "message"), BAD_VALUES)
def test_helm_template_refuses_bad_values_with_the_required_message(tmp_path, missing, message):
    out = helm("template", "mixroute", str(CHART), *values_file(tmp_path, VALID, missing))
    assert out.returncode != 0
    assert "execution error" in out.stderr
    assert re.search(message, out.stderr), out.stderr


def test_helm_template_with_the_default_values_alone_fails_on_the_store_url():
    out = helm("template", "mixroute", str(CHART))
    assert out.returncode != 0
    assert "database.url or database.existingSecret is required" in out.stderr
