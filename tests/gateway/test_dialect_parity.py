"""One prompt through the three doors (chat, Responses, Messages): the same routing decision
(chosen backend, predicted quality, stable-prefix hash) and, for the same upstream usage,
the same recorded cost; and ``/v1/route`` takes a body of each dialect, says which it
parsed, and predicts the decision its door makes."""

from __future__ import annotations

import json

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.gateway.conftest import wait_row

SYSTEM = "Be brief."


def _bodies(prompt: str) -> dict[str, tuple[str, dict]]:
    """The same request in each dialect: ``{dialect: (path, body)}``."""
    return {
        "chat": ("/chat/completions", {"model": "auto", "max_tokens": 300, "messages": [
            {"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}]}),
        "responses": ("/responses", {"model": "auto", "max_output_tokens": 300, "instructions": SYSTEM,
                                     "input": prompt, "store": False}),
        "messages": ("/messages", {"model": "auto", "max_tokens": 300, "system": SYSTEM,
                                   "messages": [{"role": "user", "content": prompt}]}),
    }


def _decision(gw, request_id: str) -> dict:
    row = wait_row(gw.settings.database_url, "decisions", request_id)
    candidates = row["candidates"] if isinstance(row["candidates"], list) else json.loads(row["candidates"])
    return {"chosen": row["chosen"], "prefix_hash": row["prefix_hash"],
            "quality": {c["backend"]: c["predicted_quality"] for c in candidates}}


def _outcome(gw, request_id: str) -> tuple:
    row = wait_row(gw.settings.database_url, "outcomes", request_id)
    return row["backend"], row["tokens_in"], row["tokens_cached"], row["tokens_out"], row["cost_usd"]


@pytest.mark.parametrize("prompt", ["What is the capital of France?",
                                    "Prove that there are infinitely many primes, step by step."])
def test_same_prompt_same_decision_and_cost_through_every_door(demo_gateway, prompt):
    decisions, outcomes, routed = {}, {}, {}
    for dialect, (path, body) in _bodies(prompt).items():
        resp = httpx.post(demo_gateway.v1 + path, json=body, timeout=30)
        assert resp.status_code == 200, resp.text
        request_id = resp.headers["x-mixroute-request-id"]
        decisions[dialect], outcomes[dialect] = _decision(demo_gateway, request_id), _outcome(demo_gateway, request_id)
        route = httpx.post(demo_gateway.v1 + "/route", json=body, timeout=30).json()
        assert route["dialect"] == dialect
        routed[dialect] = {"chosen": route["chosen"], "prefix_hash": route["prefix_hash"],
                           "quality": {c["backend"]: c["predicted_quality"] for c in route["candidates"]}}
    assert decisions["chat"] == decisions["responses"] == decisions["messages"]
    # /v1/route predicts what each door decided.
    assert routed == decisions
    # The fake backend bills the same prompt alike whatever the door: so is the recorded cost.
    assert outcomes["chat"] == outcomes["responses"] == outcomes["messages"]
    assert outcomes["chat"][4] > 0


def test_route_answers_each_dialect_with_its_canonical_body(demo_gateway):
    answers = {d: httpx.post(demo_gateway.v1 + "/route", json=b, timeout=30).json()
               for d, (_, b) in _bodies("Name three rivers").items()}
    assert {d: a["dialect"] for d, a in answers.items()} == {"chat": "chat", "responses": "responses",
                                                             "messages": "messages"}
    assert all(a["endpoint"] == "chat" for a in answers.values())
    messages = [a["rewritten_request"]["messages"] for a in answers.values()]
    assert messages[0] == messages[1] == messages[2]
    assert answers["messages"]["signals"]["door"] == "messages"
    assert answers["responses"]["signals"]["door"] == "responses"
    legacy = httpx.post(demo_gateway.v1 + "/route", json={"model": "auto", "prompt": "Once upon"}, timeout=30).json()
    assert legacy["dialect"] == "completions" and legacy["endpoint"] == "completions"


def test_route_detects_messages_by_its_own_fields_or_is_told(demo_gateway):
    plain = {"model": "auto", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}
    assert httpx.post(demo_gateway.v1 + "/route", json=plain).json()["dialect"] == "chat"
    told = httpx.post(demo_gateway.v1 + "/route", params={"dialect": "messages"}, json=plain).json()
    by_header = httpx.post(demo_gateway.v1 + "/route", headers={"anthropic-version": "2023-06-01"}, json=plain).json()
    assert told["dialect"] == by_header["dialect"] == "messages"
    blocks = {**plain, "messages": [{"role": "user", "content": [{"type": "image", "source": {
        "type": "url", "url": "https://example.com/a.png"}}, {"type": "text", "text": "what is it?"}]}]}
    answer = httpx.post(demo_gateway.v1 + "/route", json=blocks).json()
    assert answer["dialect"] == "messages"
    assert answer["rewritten_request"]["messages"][0]["content"][0] == {
        "type": "image_url", "image_url": {"url": "https://example.com/a.png"}}


@pytest.mark.parametrize(("params", "body", "param"), [
    ({"dialect": "klingon"}, {"model": "auto", "messages": [{"role": "user", "content": "hi"}]}, "dialect"),
    ({"dialect": "messages"}, {"model": "auto", "messages": [{"role": "user", "content": "hi"}]}, "max_tokens"),
    ({}, {"model": "auto", "system": "x", "max_tokens": 5, "messages": [{"role": "system", "content": "hi"}]},
     "messages.0.role"),
    ({}, {"model": "auto", "input": [{"type": "bogus_item"}]}, "input.0.type"),
])
def test_route_refuses_what_the_door_refuses(demo_gateway, params, body, param):
    resp = httpx.post(demo_gateway.v1 + "/route", params=params, json=body, timeout=30)
    assert resp.status_code == 400 and resp.json()["error"]["param"] == param, resp.text


text = st.text(st.characters(codec="utf-8", exclude_categories=["Cs", "Cc"]), min_size=1, max_size=60).filter(
    lambda s: s.strip())


@settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(system=text, prompt=text)
def test_any_prompt_routes_alike_through_every_dialect(demo_gateway, system, prompt):
    """Whatever the text (spaces at the ends, any script), the three dialects' bodies are
    decided alike: the translations keep the text the router reads."""
    bodies = {
        "chat": {"model": "auto", "max_tokens": 300, "messages": [
            {"role": "system", "content": system}, {"role": "user", "content": prompt}]},
        "responses": {"model": "auto", "max_output_tokens": 300, "instructions": system, "input": prompt},
        "messages": {"model": "auto", "max_tokens": 300, "system": system,
                     "messages": [{"role": "user", "content": prompt}]},
    }
    seen = {}
    for dialect, body in bodies.items():
        route = httpx.post(demo_gateway.v1 + "/route", json=body, timeout=30).json()
        assert route["dialect"] == dialect, route
        seen[dialect] = (route["chosen"], route["prefix_hash"], route["rewritten_request"]["messages"],
                         {c["backend"]: c["predicted_quality"] for c in route["candidates"]})
    assert seen["chat"] == seen["responses"] == seen["messages"]
