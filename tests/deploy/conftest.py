"""Fixtures for the deployment artefacts under ``deploy/``: paths, chart values, renders.

Nothing here needs a network, Docker or a helm binary: the chart is rendered by
:mod:`tests.deploy.gotemplate`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.deploy.gotemplate import merge_values, render_chart

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
CHART = DEPLOY / "helm" / "mixroute"


def chart_values(*overrides: dict) -> dict:
    """The chart's values.yaml merged with ``overrides`` in order (as ``-f a -f b``)."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for o in overrides:
        values = merge_values(values, o)
    return values


def ci_values() -> dict:
    return yaml.safe_load((CHART / "ci" / "test-values.yaml").read_text())


def manifests(rendered: dict[str, str]) -> dict[str, list[dict]]:
    """Template path -> the Kubernetes objects it rendered (empty documents dropped)."""
    return {name: [d for d in yaml.safe_load_all(text) if d]
            for name, text in rendered.items() if name.endswith(".yaml")}


@pytest.fixture(scope="session")
def rendered() -> dict[str, str]:
    """The chart rendered with ``ci/test-values.yaml`` (every optional object on)."""
    return render_chart(CHART, chart_values(ci_values()), release="mixroute", namespace="llm")


@pytest.fixture(scope="session")
def objects(rendered) -> list[dict]:
    return [o for objs in manifests(rendered).values() for o in objs]


def by_kind(objects: list[dict], kind: str) -> list[dict]:
    return [o for o in objects if o["kind"] == kind]
