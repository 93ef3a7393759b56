"""Embedding backends in the policy (``task``, :mod:`router.policy.tasks`) and the decisions
for embeddings requests (:mod:`router.embeddings`)."""

from __future__ import annotations

import pytest

from router.engine import Router
from router.decision import RoutingRequest
from router.errors import BackendNotAllowed, NoAllowedCandidate, WrongTask
from router.policy import PolicyError, parse_policy
from router.rules import PromptBlocked

POLICY = """version: 1
backends:
  - {name: chat, kind: fake, model: chat-model, quality: 0.9}
  - {name: e-dear, kind: fake, model: e1, task: embedding, tags: [hosted], pricing: {input_per_1m: 0.13, output_per_1m: 0}}
  - {name: e-cheap, kind: fake, model: e2, task: embedding, tags: [local], pricing: {input_per_1m: 0.02, output_per_1m: 0}}
  - {name: e-free, kind: fake, model: e3, task: embedding, tags: [local], pricing: {input_per_1m: 0, output_per_1m: 0}}
routes:
  - {name: auto, backends: [chat]}
  - {name: embed, backends: [e-dear, e-cheap], max_attempts: 3}
"""


def _problem(text: str) -> str:
    with pytest.raises(PolicyError) as info:
        parse_policy(text, source="policy.yaml")
    return str(info.value)


def test_a_route_mixing_tasks_is_a_policy_error_at_its_line():
    text = POLICY.replace("backends: [e-dear, e-cheap]", "backends: [e-dear, chat]")
    assert _problem(text) == ("policy.yaml:9 routes[1].backends[1]: backend 'chat' serves chat, but route 'embed' "
                              "serves embedding (its first backend 'e-dear'): a route's backends must all serve one task")


def test_the_default_route_serves_chat():
    text = POLICY.replace("version: 1\n", "version: 1\ndefault_route: embed\n")
    assert "default_route: route 'embed' serves embeddings" in _problem(text)


def test_unknown_task_and_replay_embeddings_are_refused(tmp_path):
    assert "backends[1].task: Input should be 'chat' or 'embedding'" in _problem(
        POLICY.replace("task: embedding, tags: [hosted]", "task: vectors, tags: [hosted]"))
    data = tmp_path / "d.csv"
    data.write_text('prompt,m\n"hi",True\n')
    text = POLICY + f"""  - {{name: r, backends: [rp]}}
""".replace("routes:\n", "")
    text = text.replace("routes:", f"  - {{name: rp, kind: replay, model: m, data: [{data}], task: embedding}}\nroutes:")
    assert "backends[4].task: a replay backend answers from recorded chat answers" in _problem(text)


def test_a_route_to_across_tasks_is_refused():
    rule = "rules:\n  - {name: r, routes: [auto], route_to: e-cheap}\n"
    assert "rules[0].route_to: backend 'e-cheap' serves embedding, but the rule applies to route(s) auto" in _problem(
        POLICY + rule)
    # an unscoped route_to of a chat backend holds for chat routes only: no error
    parse_policy(POLICY + "rules:\n  - {name: r, when_header: x-safe, route_to: chat}\n")


def _router(extra: str = "") -> Router:
    return Router(parse_policy(POLICY + extra))


def _req(model: str, tenant: str | None = None, headers: dict | None = None, **body) -> RoutingRequest:
    return RoutingRequest(endpoint="embeddings", body={"model": model, "input": ["x" * 400], **body}, tenant=tenant,
                          headers=headers or {})


async def test_the_cheapest_embedding_backend_is_chosen_with_the_rest_as_fallbacks():
    decision = await _router().decide(_req("embed"))
    rec = decision.record
    assert (rec.chosen, rec.fallbacks, rec.reason, rec.endpoint) == ("e-cheap", ["e-dear"], "cheapest", "embeddings")
    assert [c["expected_cost_usd"] for c in rec.candidates] == pytest.approx([100 * 0.13 / 1e6, 100 * 0.02 / 1e6])
    assert rec.signals["input_tokens"] == 100 and "predictor" not in rec.signals  # not classified
    pinned = await _router().decide(_req("e-dear"))
    assert (pinned.record.chosen, pinned.record.reason, pinned.record.pinned) == ("e-dear", "pinned", True)


async def test_token_ids_count_one_token_each():
    decision = await _router().decide(_req("embed", input=[[1, 2, 3], [4, 5]]))
    assert decision.record.signals["input_tokens"] == 5


async def test_the_task_must_match_the_endpoint():
    with pytest.raises(WrongTask) as info:
        await _router().decide(_req("auto"))
    assert info.value.param == "model" and "embed, e-dear, e-cheap, e-free" in info.value.message
    chat = RoutingRequest(endpoint="chat", body={"model": "embed", "messages": [{"role": "user", "content": "hi"}]})
    with pytest.raises(WrongTask, match="/v1/embeddings"):
        await _router().decide(chat)


async def test_rules_hold_for_embeddings():
    rules = """rules:
  - {name: acme-local, tenants: [acme], require_tags: [local]}
  - {name: beta-free, tenants: [beta], routes: [embed], route_to: e-free}
  - {name: safe-chat, tenants: [beta], route_to: chat}
  - {name: stop, when_header: x-stop, block: true}
  - {name: cap, tenants: [poor], max_cost_usd: 0.000005}
  - {name: none, tenants: [nobody], allow_backends: [chat]}
"""
    router = _router(rules)
    assert (await router.decide(_req("embed", tenant="acme"))).record.chosen == "e-cheap"
    assert (await router.decide(_req("embed", tenant="acme"))).record.fallbacks == []
    # an embedding route_to replaces the candidates; the chat one does not apply to embeddings
    assert (await router.decide(_req("embed", tenant="beta"))).record.chosen == "e-free"
    with pytest.raises(PromptBlocked):
        await router.decide(_req("embed", headers={"x-stop": "1"}))
    with pytest.raises(BackendNotAllowed):
        await router.decide(_req("e-dear", tenant="acme"))
    assert (await router.decide(_req("e-free", tenant="beta"))).record.chosen == "e-free"
    with pytest.raises(BackendNotAllowed):
        await router.decide(_req("e-cheap", tenant="beta"))
    capped = await router.decide(_req("embed", tenant="poor"))  # e-dear costs 1.3e-5 USD here, over the cap
    assert (capped.record.chosen, capped.record.fallbacks) == ("e-cheap", [])
    with pytest.raises(NoAllowedCandidate) as info:
        await router.decide(_req("embed", tenant="nobody"))
    assert info.value.record.route == "embed" and info.value.record.endpoint == "embeddings"


def test_a_hosted_model_of_the_other_task_is_refused():
    hosted = """version: 1
backends:
  - {name: chat, kind: hosted, model: openai/text-embedding-3-small, api_key: sk-x}
  - {name: emb, kind: hosted, model: openai/gpt-4o-mini, task: embedding, api_key: sk-x}
  - {name: ok, kind: hosted, model: openai/text-embedding-3-small, task: embedding, api_key: sk-x}
routes:
  - {name: auto, backends: [chat]}
"""
    problems = _problem(hosted).splitlines()
    assert problems == [
        "policy.yaml:3 backends[0].task: litellm lists 'openai/text-embedding-3-small' as an embedding model, but the "
        "backend says task: chat (the default): set task: embedding",
        "policy.yaml:4 backends[1].task: litellm lists 'openai/gpt-4o-mini' as a chat model, but the backend says "
        "task: embedding: set task: chat"]
