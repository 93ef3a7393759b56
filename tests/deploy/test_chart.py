"""deploy/helm/mixroute: renders, validates against the Kubernetes schemas, refuses bad values.

Rendering uses :mod:`tests.deploy.gotemplate` (test_helm.py repeats the checks with a real
helm binary when one is installed); schema validation uses
``kubernetes-validate`` (``pip install kubernetes-validate``; skipped without it) in strict
mode (unknown fields rejected) for the oldest supported and the newest known Kubernetes.
"""

from __future__ import annotations

import re

import pytest
import yaml

from router.policy import load_policy
from tests.deploy.conftest import CHART, by_kind, chart_values, ci_values, manifests
from tests.deploy.gotemplate import TemplateError, render_chart

# Objects each template must render with ci/test-values.yaml: template -> [(kind, name)].
EXPECTED = {
    "templates/configmap-policy.yaml": [("ConfigMap", "mixroute-policy")],
    "templates/deployment.yaml": [("Deployment", "mixroute")],
    "templates/service.yaml": [("Service", "mixroute")],
    "templates/pdb.yaml": [("PodDisruptionBudget", "mixroute")],
    "templates/hpa.yaml": [("HorizontalPodAutoscaler", "mixroute")],
    "templates/job-migrate.yaml": [("Job", "mixroute-migrate")],
    "templates/servicemonitor.yaml": [("ServiceMonitor", "mixroute")],
    "templates/keda-scaledobjects.yaml": [("ScaledObject", "mixroute-pool-vllm-llama-8b"),
                                          ("ScaledObject", "mixroute-pool-vllm-qwen-32b")],
}
CUSTOM_KINDS = {"ServiceMonitor", "ScaledObject"}
VALID = {"database": {"url": "postgresql+psycopg://m@db/m"}, "redis": {"url": "redis://r:6379/0"},
         "adminKey": {"existingSecret": "admin"}}


def test_every_template_renders_its_objects(rendered):
    got = {name: [(o["kind"], o["metadata"]["name"]) for o in objs] for name, objs in manifests(rendered).items()}
    assert got == EXPECTED


@pytest.mark.parametrize("version", ["1.25", "latest"])
def test_builtin_objects_validate_against_kubernetes_schemas(objects, version):
    kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")
    if version == "latest":
        version = kv.latest_version()
    for obj in objects:
        if obj["kind"] not in CUSTOM_KINDS:
            kv.validate(obj, version, strict=True)


def test_rendered_manifests_pass_yamllint(rendered):
    linter = pytest.importorskip("yamllint.linter", reason="pip install yamllint")
    from yamllint.config import YamlLintConfig

    conf = YamlLintConfig("extends: relaxed\nrules: {line-length: {max: 160}, trailing-spaces: enable}")
    for name, text in rendered.items():
        if name.endswith(".yaml"):
            problems = [p for p in linter.run(text, conf) if p.level == "error"]
            assert not problems, f"{name}: {problems}"


def test_policy_configmap_holds_a_valid_policy(objects, tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    (cm,) = by_kind(objects, "ConfigMap")
    path = tmp_path / "policy.yaml"
    path.write_text(cm["data"]["policy.yaml"])
    assert load_policy(path).policy.default_route == "auto"


def test_gateway_pod(objects):
    (dep,) = by_kind(objects, "Deployment")
    assert "replicas" not in dep["spec"], "the HPA owns the replica count"
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["args"] == ["serve"]
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["resources"]["requests"]["cpu"] and c["resources"]["requests"]["memory"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    env = {e["name"]: e for e in c["env"]}
    assert env["MIXROUTE_ADMIN_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "mixroute-admin", "key": "admin-key"}
    assert env["MIXROUTE_DATABASE_URL"]["valueFrom"]["secretKeyRef"]["name"] == "mixroute-store"
    assert env["OPENAI_API_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "llm-providers", "key": "openai"}
    assert env["MIXROUTE_HOST"]["value"] == "0.0.0.0"
    policy_dir = env["MIXROUTE_POLICY_PATH"]["value"].rsplit("/", 1)[0]
    (mount,) = [m for m in c["volumeMounts"] if m["name"] == "policy"]
    # ConfigMap updates reach a pod only through a directory mount (never subPath).
    assert mount["mountPath"] == policy_dir and "subPath" not in mount


def test_selectors_match_the_pods(objects):
    (dep,) = by_kind(objects, "Deployment")
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    selectors = [by_kind(objects, "Service")[0]["spec"]["selector"],
                 by_kind(objects, "PodDisruptionBudget")[0]["spec"]["selector"]["matchLabels"],
                 by_kind(objects, "ServiceMonitor")[0]["spec"]["selector"]["matchLabels"]]
    for sel in selectors:
        assert sel.items() <= pod_labels.items()


def test_migration_job_is_a_pre_install_and_pre_upgrade_hook(objects):
    (job,) = by_kind(objects, "Job")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    (c,) = job["spec"]["template"]["spec"]["containers"]
    assert c["args"] == ["db", "upgrade"]
    assert [e["name"] for e in c["env"]] == ["MIXROUTE_DATABASE_URL"]


def test_hpa_scales_on_cpu_and_in_flight(objects):
    (hpa,) = by_kind(objects, "HorizontalPodAutoscaler")
    metrics = {m["type"]: m for m in hpa["spec"]["metrics"]}
    assert metrics["Resource"]["resource"]["name"] == "cpu"
    assert metrics["Pods"]["pods"]["metric"]["name"] == "mixroute_in_flight"


def test_keda_scaled_objects_scale_pools_on_queue_depth(objects):
    for so in by_kind(objects, "ScaledObject"):
        assert so["apiVersion"] == "keda.sh/v1alpha1"
        spec = so["spec"]
        assert spec["scaleTargetRef"]["name"].startswith("vllm-")
        assert 1 <= spec["minReplicaCount"] <= spec["maxReplicaCount"], "a warm buffer, never zero"
        (trigger,) = spec["triggers"]
        assert trigger["type"] == "prometheus"
        md = trigger["metadata"]
        pool = so["metadata"]["annotations"]["mixroute.io/pool"]
        assert md["query"] == f'sum(mixroute_pool_queue_depth{{pool="{pool}",namespace="llm"}})'
        assert all(isinstance(v, str) for v in md.values()), "KEDA trigger metadata values are strings"
        assert 3 <= int(md["threshold"]) <= 5
        assert "gpu" not in md["query"].lower()


def test_service_monitor_scrapes_metrics(objects):
    (sm,) = by_kind(objects, "ServiceMonitor")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["spec"]["endpoints"][0]["path"] == "/metrics"
    assert sm["spec"]["endpoints"][0]["port"] == "http"
    # /metrics answers the admin key only while auth is on (MIXROUTE_METRICS_AUTH=auto).
    auth = sm["spec"]["endpoints"][0]["authorization"]
    assert auth["type"] == "Bearer" and auth["credentials"]["key"] == "admin-key"


def test_optional_objects_switch_off():
    values = chart_values(VALID, {"autoscaling": {"enabled": False}, "serviceMonitor": {"enabled": False},
                                  "podDisruptionBudget": {"enabled": False}, "migrations": {"enabled": False}})
    objs = [o for v in manifests(render_chart(CHART, values)).values() for o in v]
    assert sorted(o["kind"] for o in objs) == ["ConfigMap", "Deployment", "Service"]
    (dep,) = by_kind(objs, "Deployment")
    assert dep["spec"]["replicas"] == 2
    env = {e["name"]: e for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["MIXROUTE_DATABASE_URL"] == {"name": "MIXROUTE_DATABASE_URL", "value": "postgresql+psycopg://m@db/m"}


def test_existing_policy_configmap_is_used_instead():
    values = chart_values(VALID, {"policy": {"existingConfigMap": "my-policy"}})
    objs = [o for v in manifests(render_chart(CHART, values)).values() for o in v]
    assert not by_kind(objs, "ConfigMap")
    vols = by_kind(objs, "Deployment")[0]["spec"]["template"]["spec"]["volumes"]
    assert {"name": "policy", "configMap": {"name": "my-policy"}} in vols


# Values that must fail to render, with the message (a regex) they fail with; also run
# through the real helm binary in test_helm.py.
BAD_VALUES = [
    ({"database": {"url": ""}}, "database.url or database.existingSecret is required"),
    ({"redis": {"url": ""}}, "redis.url or redis.existingSecret is required"),
    ({"adminKey": {"existingSecret": ""}}, "adminKey.existingSecret is required"),
    ({"keda": {"enabled": True}}, "keda.prometheusAddress is required"),
    ({"policy": {"content": ""}}, r"policy.content \(or policy.existingConfigMap\) is required"),
    ({"keda": {"enabled": True, "prometheusAddress": "http://p:9090",
               "pools": [{"name": "p", "scaleTargetRef": {"name": "vllm-p"}}]}}, "maxReplicaCount is required"),
]


@pytest.mark.parametrize(("missing", "message"), BAD_VALUES)
def test_bad_values_fail_to_render_with_a_clear_message(missing, message):
    with pytest.raises(TemplateError, match=message):
        render_chart(CHART, chart_values(VALID, missing))


def test_default_values_alone_fail_on_the_store_url_first():
    with pytest.raises(TemplateError, match=r"^execution error: database.url or database.existingSecret"):
        render_chart(CHART, chart_values())


def test_chart_metadata_and_values_parse():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2" and chart["name"] == "mixroute"
    assert re.fullmatch(r"\d+\.\d+\.\d+", chart["version"])
    assert ci_values()["keda"]["pools"]
