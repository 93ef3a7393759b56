"""OpenTelemetry spans of real requests (in-memory exporter): structure, GenAI attributes,
and never any prompt or completion text."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

from gateway.observability.tracing import Tracing  # noqa: E402
from tests.observability.conftest import chat, serve_app, wait_row  # noqa: E402

SECRET = "PROMPT-CANARY-7f3a9"


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    def prepare(app):
        app.state.observability.tracing = Tracing(provider)  # the middleware holds the same object

    gw = serve_app(tmp_path_factory.mktemp("traced"), prepare)
    yield gw, exporter
    gw.stop()


def _spans_of(exporter, request_id: str, want: int, timeout: float = 5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        spans = exporter.get_finished_spans()
        trace_ids = {s.context.trace_id for s in spans if s.attributes.get("mixroute.request_id") == request_id}
        mine = [s for s in spans if s.context.trace_id in trace_ids]
        if len(mine) >= want:
            return mine
        time.sleep(0.05)
    raise AssertionError(f"only {len(mine)} spans for {request_id}")


@pytest.mark.parametrize("stream", [False, True])
def test_request_spans_carry_genai_attributes_and_no_prompt(traced, stream):
    gw, exporter = traced
    r = chat(gw, f"Summarise this: {SECRET}", stream=stream, max_tokens=50, temperature=0.2)
    assert r.status_code == 200
    rid = r.headers["x-mixroute-request-id"]
    wait_row(gw.settings.database_url, "outcomes", rid)
    spans = _spans_of(exporter, rid, want=5)
    by_name = {s.name: s for s in spans}
    assert {"POST /v1/chat/completions", "mixroute.decide", "mixroute.rewrite", "mixroute.store.record"} <= set(by_name)
    assert by_name["mixroute.rewrite"].parent.span_id == by_name["mixroute.decide"].context.span_id
    attempt = next(s for s in spans if s.name.startswith("chat "))
    a = attempt.attributes
    assert a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.request.model"] == attempt.name.split(" ", 1)[1]
    assert a["gen_ai.request.max_tokens"] == 50 and a["gen_ai.request.temperature"] == 0.2
    assert a["gen_ai.usage.input_tokens"] > 0 and a["gen_ai.usage.output_tokens"] > 0
    assert "gen_ai.usage.cache_creation.input_tokens" not in a  # the demo backends report no cache writes
    assert a["mixroute.backend"] == r.headers["x-mixroute-backend"]
    server = by_name["POST /v1/chat/completions"]
    nested = {"mixroute.rewrite", "mixroute.classify"}  # children of mixroute.decide
    assert all(s.parent.span_id == server.context.span_id for s in spans if s is not server and s.name not in nested)
    tables = sorted(s.attributes["mixroute.store.table"] for s in spans if s.name == "mixroute.store.record")
    assert tables == ["decisions", "outcomes"]
    dump = json.dumps([{**dict(s.attributes), "name": s.name, "events": [dict(e.attributes or {}) for e in s.events]}
                       for s in spans], default=str)
    assert SECRET not in dump and "Summarise" not in dump


@pytest.mark.parametrize("stream", [False, True])
def test_a_hosted_cache_write_is_on_the_attempt_span(tmp_path, stream):
    """A hosted Anthropic answer (the fake Messages API, litellm's translation unchanged) that
    wrote a prompt-cache prefix puts the written tokens on the attempt span."""
    import httpx

    from tests.backends.fake_anthropic import create_app, tokens
    from tests.backends.fake_upstream import UpstreamState, serve_in_thread
    from tests.gateway.conftest import start_gateway

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    state = UpstreamState()
    upstream = serve_in_thread(state, app=create_app(state))
    policy = f"""version: 1
backends:
  - {{name: claude, kind: hosted, model: anthropic/claude-sonnet-4-5, api_base: "{upstream.url}", api_key: sk-ant-test, quality: 0.9}}
routes:
  - {{name: auto, backends: [claude]}}
"""
    gw = start_gateway(tmp_path, policy, prepare=lambda app: setattr(app.state.observability, "tracing",
                                                                     Tracing(provider)))
    try:
        system = f"Traced ({stream})." + " You are the billing assistant of ACME." * 120  # > 1024 tokens
        body = {"model": "auto", "stream": stream,
                "messages": [{"role": "system", "content": system}, {"role": "user", "content": "hi"}]}
        r = httpx.post(gw.v1 + "/chat/completions", json=body, timeout=30)
        assert r.status_code == 200, r.text
        rid = r.headers["x-mixroute-request-id"]
        row = wait_row(gw.settings.database_url, "outcomes", rid)
        attempt = next(s for s in _spans_of(exporter, rid, want=5) if s.name.startswith("chat "))
        written = attempt.attributes["gen_ai.usage.cache_creation.input_tokens"]
        assert written == row["tokens_cache_write"] == tokens(system)
    finally:
        gw.stop()
        upstream.stop()


def test_failed_attempt_span_is_an_error(tmp_path):
    from tests.gateway.conftest import FALLBACK_POLICY

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    policy = tmp_path / "policy.yaml"
    policy.write_text(FALLBACK_POLICY)

    def prepare(app):
        app.state.observability.tracing = Tracing(provider)

    gw = serve_app(tmp_path, prepare, policy_path=policy)
    try:
        r = chat(gw)  # route auto: broken-500, limited-429, then good
        assert r.status_code == 200
        spans = _spans_of(exporter, r.headers["x-mixroute-request-id"], want=7)
        attempts = [s for s in spans if s.name.startswith("chat ")]
        assert [s.attributes["mixroute.backend"] for s in sorted(attempts, key=lambda s: s.start_time)] == [
            "broken-500", "limited-429", "good"]
        assert [s.status.is_ok for s in sorted(attempts, key=lambda s: s.start_time)] == [False, False, True]
        assert all("error.type" in s.attributes for s in attempts[:2] if not s.status.is_ok)
    finally:
        gw.stop()


def test_tracing_is_off_and_not_imported_by_default():
    code = ("import sys; from gateway.app import create_app; from gateway.settings import Settings; "
            "app = create_app(Settings(classifier='off')); "
            "print(app.state.observability.tracing.enabled, 'opentelemetry.sdk' in sys.modules)")
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("OTEL_") and k != "MIXROUTE_OTEL"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_classify_span_under_decide(tmp_path):
    pytest.importorskip("torch")
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    gw = serve_app(tmp_path, lambda app: setattr(app.state.observability, "tracing", Tracing(provider)),
                   classifier="on")
    try:
        r = chat(gw, f"Integrate x squared. {SECRET}")
        assert r.status_code == 200
        spans = _spans_of(exporter, r.headers["x-mixroute-request-id"], want=6)
        decide = next(s for s in spans if s.name == "mixroute.decide")
        classify = next(s for s in spans if s.name == "mixroute.classify")
        assert classify.parent.span_id == decide.context.span_id
        assert classify.attributes["mixroute.predictor"] == "classifier"
        assert SECRET not in json.dumps([dict(s.attributes) for s in spans], default=str)
    finally:
        gw.stop()
