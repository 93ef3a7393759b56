"""Rules on classifier signals, tenant allow lists, admin override, TTFT SLO handling and
GPU-time pricing."""

from __future__ import annotations

import pytest

from backends.catalog import resolve_pricing
from backends.config import Pricing
from backends.pricing import gpu_pricing
from router.engine import Router, RoutingRequest
from router.errors import InvalidRequest, NoCandidate, RequestRejected, UnknownModel
from router.live import LiveState
from router.policy import PolicyError, parse_policy
from router.predict import Prediction
from router.rules import PromptBlocked

POLICY = """version: 1
backends:
  - {name: strong, kind: fake, model: strong, quality: 0.90, pricing: {input_per_1m: 10, output_per_1m: 30}}
  - {name: mid, kind: fake, model: mid, quality: 0.88, pricing: {input_per_1m: 1, output_per_1m: 3}, max_concurrency: 2}
  - {name: local, kind: fake, model: local, quality: 0.50, tags: [self_hosted],
     pricing: {gpu_usd_per_hour: 3.6, output_tokens_per_s: 1000}}
  - {name: hardened, kind: fake, model: hardened, quality: 0.7}
routes:
  - {name: auto, backends: [strong, mid, local], quality_bar: {target: 0.95}}
  - {name: fast, backends: [strong, mid, local], quality_bar: {target: 0.95}, ttft_slo_s: 1.0}
  - {name: fast-degrade, backends: [strong, mid, local], quality_bar: {target: 0.95}, ttft_slo_s: 1.0,
     on_saturated: degrade}
  - {name: fast-reject, backends: [mid, local], quality_bar: {target: 0.95}, ttft_slo_s: 1.0, on_saturated: reject}
rules:
  - {name: pii-local, when_signal: {pii: 0.5}, require_tags: [self_hosted]}
  - {name: jailbreak, when_signal: {injection: 0.8}, block: true}
  - {name: suspicious, when_signal: {injection: 0.5}, route_to: hardened}
  - {name: acme-allow, tenants: [acme], allow_backends: [mid, local]}
"""


class SignalPredictor:
    """A predictor returning fixed signals (the classifier's shape), priors for quality."""

    def __init__(self, **signals):
        self.signals = signals

    async def predict(self, text, backends):
        return Prediction(quality={b.name: b.quality for b in backends}, signals=dict(self.signals),
                          source="test")


def _req(model="auto", tenant=None, headers=None, admin=False):
    return RoutingRequest("chat", {"model": model, "messages": [{"role": "user", "content": "hello there"}]},
                          tenant=tenant, headers=headers or {}, admin=admin)


async def test_pii_signal_keeps_only_self_hosted():
    d = await Router(parse_policy(POLICY), SignalPredictor(pii=0.9)).decide(_req())
    assert [c.backend for c in d.candidates] == ["local"] and d.record.chosen == "local"
    assert any("pii-local" in n and "pii=0.90" in n for n in d.record.signals["rules"])
    d = await Router(parse_policy(POLICY), SignalPredictor(pii=0.1)).decide(_req())
    assert d.record.chosen == "mid"


async def test_injection_blocks_or_redirects():
    with pytest.raises(PromptBlocked) as info:
        await Router(parse_policy(POLICY), SignalPredictor(injection=0.95)).decide(_req())
    assert info.value.status == 400 and info.value.code == "prompt_blocked" and "jailbreak" in info.value.message
    d = await Router(parse_policy(POLICY), SignalPredictor(injection=0.6)).decide(_req())
    assert d.record.chosen == "hardened"


async def test_tenant_allow_list():
    d = await Router(parse_policy(POLICY)).decide(_req(tenant="acme"))
    assert {c.backend for c in d.candidates} == {"mid", "local"}
    d = await Router(parse_policy(POLICY)).decide(_req(tenant="other"))
    assert {c.backend for c in d.candidates} == {"strong", "mid", "local"}


async def test_admin_override_header():
    headers = {"x-mixroute-backend-override": "strong"}
    d = await Router(parse_policy(POLICY)).decide(_req(headers=headers, admin=True))
    assert d.record.chosen == "strong" and d.record.reason == "admin_override" and d.record.route == "auto"
    d = await Router(parse_policy(POLICY)).decide(_req(headers=headers, admin=False))
    assert d.record.chosen == "mid"  # ignored for non-admins
    with pytest.raises(UnknownModel):
        await Router(parse_policy(POLICY)).decide(_req(headers={"x-mixroute-backend-override": "nope"}, admin=True))
    pinned = _req(model="local", headers=headers, admin=True)  # a backend, not a route: nothing to override
    with pytest.raises(InvalidRequest, match="already names a backend"):
        await Router(parse_policy(POLICY)).decide(pinned)


def _saturated_live() -> LiveState:
    live = LiveState()
    for _ in range(5):
        live.started("mid")
    live.finished("mid", ttft_s=0.5, latency_s=2.0)  # 4 in flight, capacity 2 -> 2 queued
    live.started("strong")
    live.finished("strong", ttft_s=0.3, latency_s=1.0)
    return live


async def test_slo_skips_saturated_candidate():
    live = _saturated_live()
    # mid: 0.5 + 2 queued x 2.0 s / 2 = 2.5 s predicted TTFT > 1.0 s SLO
    d = await Router(parse_policy(POLICY), live=live).decide(_req("fast"))
    mid = next(c for c in d.candidates if c.backend == "mid")
    assert mid.predicted_ttft_s == pytest.approx(2.5) and not mid.meets_slo
    assert mid.note == "predicted TTFT 2.5 s over the SLO 1 s"
    assert d.record.chosen == "strong" and d.record.reason == "cheapest_above_bar"
    d = await Router(parse_policy(POLICY), live=live).decide(_req("auto"))  # no SLO on this route
    assert d.record.chosen == "mid"


async def test_saturated_policies():
    live = _saturated_live()
    live.set_waiting("strong", 0)
    for _ in range(3):
        live.started("strong")
    pol = parse_policy(POLICY.replace("quality: 0.90, pricing", "quality: 0.90, max_concurrency: 1, pricing"))
    # strong: 0.3 + 2 queued x 1.0 / 1 = 2.3 s; mid 2.5 s: every adequate candidate breaks the SLO.
    d = await Router(pol, live=live).decide(_req("fast"))
    assert d.record.reason == "best_effort_slo" and d.record.chosen == "mid"
    d = await Router(pol, live=live).decide(_req("fast-degrade"))
    assert d.record.reason == "degraded_for_slo" and d.record.chosen == "local"
    with pytest.raises(RequestRejected) as info:
        await Router(pol, live=live).decide(_req("fast-reject"))
    assert info.value.status == 429 and info.value.retry_after_s >= 1


def test_gpu_pricing_formula():
    p = gpu_pricing(Pricing(gpu_usd_per_hour=3.6, output_tokens_per_s=1000))
    # 3.6 USD/h = 0.001 USD/s; 1000 tokens/s -> 1e-6 USD/token = 1 USD per 1M output tokens.
    assert p.output_per_1m == pytest.approx(1.0)
    assert p.input_per_1m == pytest.approx(0.1)  # assumed prefill 10x decode throughput
    p = gpu_pricing(Pricing(gpu_usd_per_hour=3.6, output_tokens_per_s=1000, input_tokens_per_s=4000))
    assert p.input_per_1m == pytest.approx(0.25)
    local = parse_policy(POLICY).policy.backend("local")
    assert resolve_pricing(local).output_per_1m == pytest.approx(1.0)


@pytest.mark.parametrize("snippet, problem", [
    ("  - {name: r, route_to: nope}\n", "rules[4].route_to: unknown backend 'nope'"),
    ("  - {name: r, allow_backends: [mid, nope]}\n", "rules[4].allow_backends[1]: unknown backend 'nope'"),
    ("  - {name: r, when_signal: {pii: 0.5}}\n", "a rule needs an action"),
    ("  - {name: r, block: true, route_to: mid}\n", "contradicts"),
])
def test_bad_rules_rejected_with_line(snippet, problem):
    with pytest.raises(PolicyError) as info:
        parse_policy(POLICY + snippet, source="p.yaml")
    assert problem in str(info.value) and str(info.value).startswith("p.yaml:19 rules[4]")


def test_gpu_pricing_needs_throughput():
    with pytest.raises(PolicyError) as info:
        parse_policy(POLICY.replace("gpu_usd_per_hour: 3.6, output_tokens_per_s: 1000", "gpu_usd_per_hour: 3.6"))
    assert "output_tokens_per_s" in str(info.value)


async def test_all_candidates_removed_by_rules_is_a_clear_error():
    pol = parse_policy(POLICY + "  - {name: none-left, tenants: [t0], allow_backends: [hardened]}\n")  # not in route auto
    with pytest.raises(NoCandidate) as info:
        await Router(pol).decide(_req(tenant="t0"))
    assert "none-left" in info.value.message


async def test_expected_cost_uses_cached_price_for_a_warm_prefix():
    pol = parse_policy(POLICY.replace("{input_per_1m: 1, output_per_1m: 3}",
                                      "{input_per_1m: 1, output_per_1m: 3, cached_input_per_1m: 0.1}"))
    router = Router(pol)
    system = "You are the billing assistant of ACME. Answer briefly and politely. " * 40
    req = RoutingRequest("chat", {"model": "auto", "messages": [{"role": "system", "content": system},
                                                                 {"role": "user", "content": "hi"}]})
    cold = await router.decide(req)
    mid_cold = next(c for c in cold.candidates if c.backend == "mid")
    assert mid_cold.expected_cached_tokens == 0
    router.live.saw_prefix("mid", cold.record.prefix_hash)
    warm = await router.decide(RoutingRequest("chat", dict(req.body)))
    mid_warm = next(c for c in warm.candidates if c.backend == "mid")
    assert mid_warm.expected_cached_tokens > 500
    assert mid_warm.expected_cost_usd < mid_cold.expected_cost_usd
    assert not router.live.prefix_warm("mid", cold.record.prefix_hash, now=10**9)  # expired after the TTL


async def test_context_window_filters_candidates():
    from router.errors import ContextTooLong

    pol = parse_policy(POLICY.replace("quality: 0.88, pricing", "quality: 0.88, context_tokens: 1000, pricing")
                       .replace("quality: 0.90, pricing", "quality: 0.90, context_tokens: 1000, pricing")
                       .replace("quality: 0.50, tags", "quality: 0.50, context_tokens: 1000, tags"))
    router = Router(pol)
    short = RoutingRequest("chat", {"model": "auto", "messages": [{"role": "user", "content": "hi"}]})
    assert (await router.decide(short)).record.chosen == "mid"
    long = RoutingRequest("chat", {"model": "auto", "messages": [{"role": "user", "content": "word " * 2000}]})
    with pytest.raises(ContextTooLong) as info:
        await router.decide(long)
    assert info.value.status == 400 and info.value.code == "context_length_exceeded"
    near = RoutingRequest("chat", {"model": "auto", "max_tokens": 900,
                                   "messages": [{"role": "user", "content": "word " * 100}]})
    with pytest.raises(ContextTooLong):
        await router.decide(near)  # ~125 prompt tokens + 900 max_tokens > 1000


def test_hosted_context_from_litellm_map():
    pytest.importorskip("litellm")
    from backends.catalog import resolve_context
    from backends.config import BackendConfig

    cfg = BackendConfig(name="h", kind="hosted", model="openai/gpt-4o-mini")
    assert (resolve_context(cfg) or 0) >= 100_000
    assert resolve_context(BackendConfig(name="f", kind="fake", model="x")) is None


class TextRecorder(SignalPredictor):
    """Records the text the classifier was given."""

    def __init__(self, **signals):
        super().__init__(**signals)
        self.texts: list[str] = []

    async def predict(self, text, backends):
        self.texts.append(text)
        return await super().predict(text, backends)


async def test_pinned_requests_obey_the_rules_unless_admin():
    from router.errors import BackendNotAllowed

    # Tenant allow list: acme may not pin 'strong'; another tenant may; an admin may.
    with pytest.raises(BackendNotAllowed) as info:
        await Router(parse_policy(POLICY)).decide(_req(model="strong", tenant="acme"))
    assert info.value.status == 403 and info.value.code == "backend_not_allowed" and "acme-allow" in info.value.message
    assert (await Router(parse_policy(POLICY)).decide(_req(model="mid", tenant="acme"))).record.chosen == "mid"
    assert (await Router(parse_policy(POLICY)).decide(_req(model="strong", tenant="other"))).record.chosen == "strong"
    assert (await Router(parse_policy(POLICY)).decide(_req(model="strong", tenant="acme", admin=True))).record.chosen \
        == "strong"
    # Signal rules run the classifier for pinned requests too: block, route_to, require_tags.
    with pytest.raises(PromptBlocked, match="jailbreak"):
        await Router(parse_policy(POLICY), SignalPredictor(injection=0.95)).decide(_req(model="local"))
    with pytest.raises(BackendNotAllowed, match="suspicious"):
        await Router(parse_policy(POLICY), SignalPredictor(injection=0.6)).decide(_req(model="mid"))
    with pytest.raises(BackendNotAllowed, match="pii-local"):
        await Router(parse_policy(POLICY), SignalPredictor(pii=0.9)).decide(_req(model="strong"))
    d = await Router(parse_policy(POLICY), SignalPredictor(pii=0.9)).decide(_req(model="local"))
    assert d.record.chosen == "local" and d.record.reason == "pinned" and any("pii-local" in n for n in d.record.signals["rules"])


async def test_pinned_request_over_a_cost_limit_and_route_scoped_rules():
    from router.errors import BackendNotAllowed

    policy = POLICY + """  - {name: cheap-auto, routes: [auto], max_cost_usd: 0.0000001}
  - {name: fast-only, routes: [fast-reject], when_signal: {pii: 0.01}, block: true}
"""
    with pytest.raises(BackendNotAllowed, match="over the policy's limit"):
        await Router(parse_policy(policy)).decide(_req(model="strong"))  # strong is in route auto
    # A route-scoped rule holds for the route's backends ('mid' is in fast-reject), not for
    # 'hardened', which is in no route.
    with pytest.raises(PromptBlocked, match="fast-only"):
        await Router(parse_policy(policy), SignalPredictor(pii=0.2)).decide(_req(model="mid"))
    assert (await Router(parse_policy(policy), SignalPredictor(pii=0.2)).decide(_req(model="hardened"))).record.chosen \
        == "hardened"


async def test_pinned_requests_without_signal_rules_skip_the_classifier():
    recorder = TextRecorder()
    policy = POLICY.split("rules:")[0] + "rules:\n  - {name: acme-allow, tenants: [acme], allow_backends: [mid]}\n"
    await Router(parse_policy(policy), recorder).decide(_req(model="strong"))
    assert recorder.texts == []


async def test_the_classifier_reads_the_prompt_before_rewriting():
    recorder = TextRecorder()
    body = {"model": "auto", "messages": [
        {"role": "system", "content": "You are a helpful assistant. The current date is 2024-05-01."},
        {"role": "user", "content": "What is the capital of France?"}]}
    d = await Router(parse_policy(POLICY), recorder).decide(RoutingRequest("chat", body))
    sent = d.body["messages"]
    assert "2024-05-01" not in sent[0]["content"]  # the rewriter moved the date out of the system prompt
    assert recorder.texts and "2024-05-01" in recorder.texts[0] and "mixroute" not in recorder.texts[0]


async def test_route_to_never_escapes_a_tenant_allow_list():
    # acme-allow (mid, local) comes after suspicious (route_to hardened) in the policy: the
    # allow list still holds, whatever the order, and the request has no candidate left.
    policy = POLICY.replace("  - {name: suspicious, when_signal: {injection: 0.5}, route_to: hardened}\n", "") \
        + "  - {name: suspicious, when_signal: {injection: 0.5}, route_to: hardened}\n"
    for text in (POLICY, policy):
        with pytest.raises(NoCandidate, match="acme-allow"):
            await Router(parse_policy(text), SignalPredictor(injection=0.6)).decide(_req(tenant="acme"))
        d = await Router(parse_policy(text), SignalPredictor(injection=0.6)).decide(_req(tenant="other"))
        assert d.record.chosen == "hardened"


async def test_signal_below_sends_partly_scanned_prompts_to_a_hardened_backend():
    policy = POLICY + "  - {name: partly-scanned, when_signal_below: {scan_coverage: 1}, route_to: hardened}\n"
    d = await Router(parse_policy(policy), SignalPredictor(scan_coverage=0.4)).decide(_req())
    assert d.record.chosen == "hardened"
    assert any("partly-scanned" in n and "scan_coverage=0.40<1" in n for n in d.record.signals["rules"])
    for signals in ({"scan_coverage": 1.0}, {}):  # fully read, or no such signal (no classifier): no effect
        d = await Router(parse_policy(policy), SignalPredictor(**signals)).decide(_req())
        assert d.record.chosen == "mid" and not any("partly-scanned" in n for n in d.record.signals["rules"])
    # both conditions of one rule must hold
    both = POLICY + "  - {name: odd, when_signal: {pii: 0.5}, when_signal_below: {scan_coverage: 0.5}, block: true}\n"
    with pytest.raises(PromptBlocked, match=r"odd.*pii=0.90>=0.5, scan_coverage=0.20<0.5"):
        await Router(parse_policy(both), SignalPredictor(pii=0.9, scan_coverage=0.2)).decide(_req())
    d = await Router(parse_policy(both), SignalPredictor(pii=0.9, scan_coverage=0.8)).decide(_req())
    assert d.record.chosen == "local"


async def test_pinned_requests_read_signals_for_a_below_rule():
    policy = POLICY + "  - {name: partly-scanned, when_signal_below: {scan_coverage: 1}, block: true}\n"
    with pytest.raises(PromptBlocked, match="partly-scanned"):
        await Router(parse_policy(policy), SignalPredictor(scan_coverage=0.3)).decide(_req(model="mid"))
