"""deploy/compose.yaml and the files it mounts: parse, cross-reference, validate.

No Docker engine runs here: the stack is not started. What is checked is what breaks a
``docker compose up`` before any container runs (missing files, dangling service names,
an invalid policy) and the wiring the stack exists to show.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest
import yaml

from router.policy import load_policy
from tests.deploy.conftest import DEPLOY

COMPOSE = DEPLOY / "compose.yaml"


@pytest.fixture(scope="module")
def services() -> dict:
    return yaml.safe_load(COMPOSE.read_text())["services"]


def bind_mounts(service: dict) -> list[tuple[Path, str]]:
    out = []
    for v in service.get("volumes", []):
        src, dst = v.split(":")[:2]
        if src.startswith("."):
            out.append(((DEPLOY / src).resolve(), dst))
    return out


def test_the_stack_has_every_part(services):
    assert {"lb", "gateway-1", "gateway-2", "postgres", "redis", "migrate", "prometheus", "grafana"} <= set(services)
    assert len([s for s in services if s.startswith("fake-vllm-")]) >= 2


def test_every_bind_mount_and_build_file_exists(services):
    for name, svc in services.items():
        for src, _ in bind_mounts(svc):
            assert src.exists(), f"{name}: {src}"
        if "build" in svc:
            ctx = (DEPLOY / svc["build"]["context"]).resolve()
            assert (ctx / svc["build"]["dockerfile"]).is_file(), name


def test_gateways_start_after_the_migration_with_shared_state_and_an_admin_key(services):
    assert services["migrate"]["command"] == ["db", "upgrade"]
    for name in ("gateway-1", "gateway-2"):
        svc = services[name]
        assert svc["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
        env = svc["environment"]
        assert re.fullmatch(r"postgresql\+psycopg://\w+:\w+@postgres:5432/\w+", env["MIXROUTE_DATABASE_URL"])
        assert env["MIXROUTE_REDIS_URL"] == "redis://redis:6379/0"
        assert env["MIXROUTE_ADMIN_KEY"].startswith("${MIXROUTE_ADMIN_KEY:?"), "no default admin key"
        assert ((DEPLOY / "compose" / "policy").resolve(), "/etc/mixroute") in bind_mounts(svc)


def test_policy_is_valid_and_its_pool_is_the_fake_replicas(services):
    loaded = load_policy(DEPLOY / "compose" / "policy" / "policy.yaml")
    pools = [b for b in loaded.policy.backends if b.kind == "vllm"]
    assert pools
    for b in pools:
        for url in b.endpoints:
            host = re.match(r"http://([^:/]+)", url).group(1)
            assert host in services and services[host]["entrypoint"][-1] == "/srv/fake_vllm.py"


def test_load_balancer_upstreams_are_the_gateways(services):
    conf = (DEPLOY / "nginx" / "nginx.conf").read_text()
    upstreams = re.findall(r"^\s*server\s+([\w-]+):8000", conf, re.M)
    assert sorted(upstreams) == ["gateway-1", "gateway-2"]
    assert "proxy_buffering off" in conf, "SSE streams must not be buffered"


def test_prometheus_scrapes_the_services_of_the_stack(services):
    prom = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    targets = [t for job in prom["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]]
    assert {t.split(":")[0] for t in targets} <= set(services)
    assert {"gateway-1:8000", "gateway-2:8000"} <= set(targets)
    # /metrics answers the admin key only while auth is on (MIXROUTE_METRICS_AUTH=auto).
    (job,) = [j for j in prom["scrape_configs"] if j["job_name"] == "mixroute"]
    key_file = job["authorization"]["credentials_file"]
    assert key_file in {c["target"] for c in services["prometheus"]["configs"]}
    rules = yaml.safe_load((DEPLOY / "prometheus" / "rules.yml").read_text())
    exprs = " ".join(r["expr"] for g in rules["groups"] for r in g["rules"])
    assert "mixroute_pool_queue_depth" in exprs


def test_grafana_is_provisioned_with_the_shipped_dashboard(services):
    mounts = dict((d, s) for s, d in bind_mounts(services["grafana"]))
    dash = mounts["/var/lib/grafana/dashboards/mixroute/mixroute.json"]
    assert dash == (DEPLOY / "grafana" / "mixroute.json").resolve()
    assert json.loads(dash.read_text())["uid"]
    prov = mounts["/etc/grafana/provisioning"]
    (provider,) = yaml.safe_load((prov / "dashboards" / "mixroute.yaml").read_text())["providers"]
    assert provider["options"]["path"] == "/var/lib/grafana/dashboards/mixroute"
    (ds,) = yaml.safe_load((prov / "datasources" / "prometheus.yaml").read_text())["datasources"]
    assert ds["type"] == "prometheus" and ds["url"] == "http://prometheus:9090"


def test_fake_replica_launcher_builds_the_bench_replica(monkeypatch):
    spec = importlib.util.spec_from_file_location("compose_fake_vllm", DEPLOY / "compose" / "fake_vllm.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    served = {}
    monkeypatch.setattr(mod.uvicorn, "run", lambda app, **kw: served.update(app=app, **kw))
    monkeypatch.setenv("FAKE_VLLM_MODEL", "llama-3.1-8b-instruct")
    mod.main()
    assert served["host"] == "0.0.0.0" and served["port"] == 8000
    paths = {r.path for r in served["app"].routes}
    assert {"/v1/chat/completions", "/metrics", "/health"} <= paths


def test_yamllint_deploy_folder():
    pytest.importorskip("yamllint", reason="pip install yamllint")
    from yamllint import config, linter

    conf = config.YamlLintConfig(file=str(DEPLOY / ".yamllint.yaml"))
    files = [p for p in DEPLOY.rglob("*") if p.suffix in (".yaml", ".yml") and "templates" not in p.parts]
    assert len(files) >= 8
    for f in files:
        problems = list(linter.run(f.read_text(), conf, str(f)))
        assert not problems, f"{f}: {problems}"
