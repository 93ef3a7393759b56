"""What deploy/ names must exist in the gateway: settings, CLI commands, metrics and labels.

The Dockerfile, the compose file and the chart set ``MIXROUTE_*`` variables, run ``mixroute``
sub-commands and scale on Prometheus series; a typo in any of them would only show up in a
running cluster (a setting silently ignored, a crash-looping pod, an autoscaler reading
nothing). These tests hold them against :mod:`gateway.settings`, :mod:`gateway.cli` and
:mod:`gateway.observability.metrics`.
"""

from __future__ import annotations

import logging
import re

import pytest
import yaml
from prometheus_client import generate_latest
from typer.testing import CliRunner

from gateway.cli import app as cli
from gateway.observability.metrics import Metrics
from gateway.settings import Settings
from tests.deploy.conftest import DEPLOY, by_kind
from tests.deploy.test_dockerfile import runtime_stage


def _containers(objects: list[dict]) -> list[dict]:
    return [c for kind in ("Deployment", "Job") for o in by_kind(objects, kind)
            for c in o["spec"]["template"]["spec"]["containers"]]


def _deploy_env_names(objects: list[dict]) -> set[str]:
    names = {e["name"] for c in _containers(objects) for e in c.get("env", [])}
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())["services"]
    names |= {n for svc in compose.values() for n in (svc.get("environment") or {})}
    for word, args in runtime_stage():
        if word == "ENV":
            names |= set(re.findall(r"(\w+)=", args))
    return names


def test_every_mixroute_variable_set_by_deploy_is_a_gateway_setting(objects):
    names = {n for n in _deploy_env_names(objects) if n.startswith("MIXROUTE_")}
    assert {"MIXROUTE_DATABASE_URL", "MIXROUTE_REDIS_URL", "MIXROUTE_ADMIN_KEY", "MIXROUTE_POLICY_PATH"} <= names
    fields = set(Settings.model_fields)
    unknown = sorted(n for n in names if n.removeprefix("MIXROUTE_").lower() not in fields)
    assert not unknown, f"not settings of gateway/settings.py (silently ignored): {unknown}"


def test_every_command_the_containers_run_exists(objects):
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())["services"]
    commands = {tuple(c["args"]) for c in _containers(objects)}
    commands |= {tuple(svc["command"]) for svc in compose.values()
                 if "command" in svc and svc.get("image") == "mixroute:local"}
    commands.add(tuple(yaml.safe_load(dict(runtime_stage())["CMD"])))
    assert commands == {("serve",), ("db", "upgrade")}
    for args in commands:
        result = CliRunner().invoke(cli, [*args, "--help"])
        assert result.exit_code == 0, f"mixroute {' '.join(args)}: {result.output}"


def _exposed() -> str:
    m = Metrics()
    m.queue_depth.labels("llama-3.1-8b-instruct").inc()
    m.in_flight.labels("llama-3.1-8b-instruct").inc()
    return generate_latest(m.registry).decode()


def test_keda_and_hpa_series_are_exposed_by_the_gateway_with_a_pool_label(objects):
    text = _exposed()
    for so in by_kind(objects, "ScaledObject"):
        query = so["spec"]["triggers"][0]["metadata"]["query"]
        (series,) = re.findall(r"(mixroute_\w+)\{", query)
        assert re.search(rf'^{series}\{{pool="llama-3.1-8b-instruct"\}} 1\.0$', text, re.M), series
    # The HPA's mixroute_in_flight is prometheus-adapter's rename of a gateway series.
    adapter = yaml.safe_load((DEPLOY / "prometheus" / "adapter-rules.yaml").read_text())
    (rule,) = adapter["rules"]["custom"]
    (hpa,) = by_kind(objects, "HorizontalPodAutoscaler")
    pods_metric = [m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"] if m["type"] == "Pods"]
    assert pods_metric == [rule["name"]["as"]]
    source = re.match(r"(\w+)\{", rule["seriesQuery"]).group(1)
    assert re.fullmatch(rule["name"]["matches"], source)
    assert re.search(rf'^{source}\{{pool="llama-3.1-8b-instruct"\}} 1\.0$', text, re.M), source


def _documented_series() -> set[str]:
    """The series of gateway/observability/metrics.py's documented table (some, like the
    store's, appear only once a store is attached), and of the per-replica collector's."""
    import gateway.observability.metrics as mod
    import gateway.observability.replicas as replicas

    return {s for m in (mod, replicas) for s in re.findall(r"^\s+(mixroute_\w+)[{ ]", m.__doc__, re.M)}


def test_prometheus_rules_and_the_dashboard_use_gateway_series():
    documented = _documented_series()
    assert {"mixroute_pool_queue_depth", "mixroute_pool_in_flight"} <= documented
    rules = yaml.safe_load((DEPLOY / "prometheus" / "rules.yml").read_text())
    exprs = [r["expr"] for g in rules["groups"] for r in g["rules"]]
    exprs += re.findall(r'"expr":\s*"((?:[^"\\]|\\.)*)"', (DEPLOY / "grafana" / "mixroute.json").read_text())
    series = {re.sub(r"_(bucket|count|sum)$", "", s) for e in exprs for s in re.findall(r"\bmixroute_[a-z_]+", e)}
    assert len(series) > 5
    assert not sorted(series - documented), "not gateway metrics"


def test_serve_with_the_chart_environment(objects, monkeypatch, tmp_path):
    """``mixroute serve`` with the Deployment's variables (secrets filled in) reads every one of
    them, listens on the pod address and keeps INFO logs free of httpx's per-request lines."""
    import uvicorn

    import gateway.app

    (dep,) = by_kind(objects, "Deployment")
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    (cm,) = by_kind(objects, "ConfigMap")
    policy = tmp_path / "policy.yaml"
    policy.write_text(cm["data"]["policy.yaml"])
    for e in c["env"]:
        value = e.get("value", f"secret-of-{e['name']}")
        if e["name"] == "MIXROUTE_DATABASE_URL":
            value = f"sqlite:///{tmp_path / 'store.db'}"
        if e["name"] == "MIXROUTE_POLICY_PATH":
            value = str(policy)
        monkeypatch.setenv(e["name"], value)
    seen = {}
    monkeypatch.setattr(gateway.app, "create_app", lambda settings: seen.setdefault("settings", settings))
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: seen.update(kw))
    httpx_logger = logging.getLogger("httpx")
    monkeypatch.setattr(httpx_logger, "level", httpx_logger.level)

    from gateway.serve import run

    run(policy=None, host=None, port=None, database_url=None)
    s = seen["settings"]
    assert (seen["host"], seen["port"]) == ("0.0.0.0", 8000)
    assert s.admin_key == "secret-of-MIXROUTE_ADMIN_KEY" and s.redis_url == "redis://redis-master:6379/0"
    assert s.policy_path == policy and s.classifier == "auto" and s.key_cache_ttl_s == 5.0
    assert httpx_logger.getEffectiveLevel() >= logging.WARNING


@pytest.mark.parametrize("level", ["info", "debug"])
def test_httpx_request_lines_only_at_debug(level, monkeypatch, tmp_path):
    import uvicorn

    import gateway.app

    monkeypatch.setenv("MIXROUTE_ADMIN_KEY", "k")
    monkeypatch.setenv("MIXROUTE_LOG_LEVEL", level)
    monkeypatch.setattr(gateway.app, "create_app", lambda settings: None)
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: None)
    httpx_logger = logging.getLogger("httpx")
    monkeypatch.setattr(httpx_logger, "level", logging.NOTSET)
    from gateway.serve import run

    run(policy=None, host=None, port=None, database_url=f"sqlite:///{tmp_path / 's.db'}")
    assert (httpx_logger.level == logging.WARNING) == (level == "info")
