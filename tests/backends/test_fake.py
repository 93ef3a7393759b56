"""The fake backend honours the request fields a real model does: ``max_tokens`` /
``max_completion_tokens``, ``stop``, ``response_format``, tool results, ``n`` (streaming
and not); in process, then over HTTP through the gateway."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from backends.config import BackendConfig
from backends.fake.backend import FakeBackend
from backends.openai_shapes import estimate_tokens
from tests.gateway.conftest import Gateway, start_gateway

USER = {"role": "user", "content": "please say hello to the whole world STOPHERE and then goodbye"}
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                          "required": ["city"]}}}]
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"}, "age": {"type": "integer"}, "score": {"type": "number"},
        "ok": {"type": "boolean"}, "tags": {"type": "array", "items": {"type": "string"}},
        "kind": {"type": "string", "enum": ["a", "b"]}, "maybe": {"type": ["string", "null"]},
        "address": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                    "additionalProperties": False},
        "owner": {"$ref": "#/$defs/person"},
    },
    "required": ["name", "age", "score", "ok", "tags", "kind", "maybe", "address", "owner"],
    "additionalProperties": False,
    "$defs": {"person": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}},
}


@pytest.fixture
def fake() -> FakeBackend:
    return FakeBackend(BackendConfig(name="fake", kind="fake", model="demo"))


def _chat(**extra) -> dict:
    return {"model": "demo", "messages": [USER], **extra}


async def _stream(backend: FakeBackend, body: dict) -> list[dict]:
    return [c async for c in backend.stream("chat", body)]


def _texts(chunks: list[dict]) -> dict[int, str]:
    out: dict[int, str] = {}
    for ch in chunks:
        for c in ch["choices"]:
            out[c["index"]] = out.get(c["index"], "") + (c["delta"].get("content") or "")
    return out


def _finishes(chunks: list[dict]) -> dict[int, str]:
    return {c["index"]: c["finish_reason"] for ch in chunks for c in ch["choices"] if c.get("finish_reason")}


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
async def test_token_limit_truncates_with_finish_length(fake, field):
    free = await fake.send("chat", _chat())
    assert free["usage"]["completion_tokens"] > 5
    out = await fake.send("chat", _chat(**{field: 5}))
    text = out["choices"][0]["message"]["content"]
    assert free["choices"][0]["message"]["content"].startswith(text)
    assert estimate_tokens(text) == out["usage"]["completion_tokens"] == 5
    assert out["choices"][0]["finish_reason"] == "length"

    chunks = await _stream(fake, _chat(**{field: 5}))
    assert _texts(chunks) == {0: text} and _finishes(chunks) == {0: "length"}


async def test_token_limit_above_the_answer_changes_nothing(fake):
    free = await fake.send("chat", _chat())
    out = await fake.send("chat", _chat(max_tokens=10_000))
    assert out["choices"][0]["message"]["content"] == free["choices"][0]["message"]["content"]
    assert out["choices"][0]["finish_reason"] == "stop"


@pytest.mark.parametrize("stop", ["STOPHERE", ["nothing-like-this", "STOPHERE", "goodbye"]])
async def test_stop_cuts_at_the_first_stop_string(fake, stop):
    out = await fake.send("chat", _chat(stop=stop))
    text = out["choices"][0]["message"]["content"]
    assert text.endswith("whole world ") and "STOPHERE" not in text and "goodbye" not in text
    assert out["choices"][0]["finish_reason"] == "stop"
    out = await fake.send("completions", {"model": "demo", "prompt": USER["content"], "stop": stop})
    assert "STOPHERE" not in out["choices"][0]["text"]


async def test_json_object_answers_json(fake):
    out = await fake.send("chat", _chat(response_format={"type": "json_object"}))
    value = json.loads(out["choices"][0]["message"]["content"])
    assert isinstance(value, dict) and value["answer"]


@pytest.mark.parametrize("strict", [False, True])
async def test_json_schema_answers_a_valid_instance(fake, strict):
    jsonschema = pytest.importorskip("jsonschema")
    fmt = {"type": "json_schema", "json_schema": {"name": "thing", "schema": SCHEMA, "strict": strict}}
    out = await fake.send("chat", _chat(response_format=fmt))
    value = json.loads(out["choices"][0]["message"]["content"])
    jsonschema.validate(value, SCHEMA)
    assert set(value) == set(SCHEMA["required"])
    assert value["kind"] == "a" and value["owner"] == {"id": 1} and value["address"] == {"city": "example"}


async def test_tool_arguments_are_valid_for_the_schema(fake):
    jsonschema = pytest.importorskip("jsonschema")
    tools = [{"type": "function", "function": {"name": "save", "parameters": SCHEMA}}]
    out = await fake.send("chat", _chat(tools=tools))
    jsonschema.validate(json.loads(out["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]), SCHEMA)


async def test_tool_result_is_answered_in_text_not_another_call(fake):
    first = await fake.send("chat", _chat(tools=TOOLS))
    call = first["choices"][0]["message"]["tool_calls"][0]
    messages = [USER, {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": call["id"], "content": "Sunny, 21 C"}]
    out = await fake.send("chat", {"model": "demo", "messages": messages, "tools": TOOLS})
    choice = out["choices"][0]
    assert choice["finish_reason"] == "stop" and "tool_calls" not in choice["message"]
    assert "Sunny, 21 C" in choice["message"]["content"]
    chunks = await _stream(fake, {"model": "demo", "messages": messages, "tools": TOOLS})
    assert not any(c["delta"].get("tool_calls") for ch in chunks for c in ch["choices"])


@pytest.mark.parametrize("extra", [{}, {"tools": TOOLS}, {"max_tokens": 3}])
async def test_stream_with_n_emits_every_choice_and_bills_them_all(fake, extra):
    full = await fake.send("chat", _chat(n=3, **extra))
    assert [c["index"] for c in full["choices"]] == [0, 1, 2]
    chunks = await _stream(fake, _chat(n=3, **extra))
    text = full["choices"][0]["message"]["content"] or ""
    assert _texts(chunks) == {0: text, 1: text, 2: text}
    assert _finishes(chunks) == {i: full["choices"][0]["finish_reason"] for i in range(3)}
    assert chunks[-1]["usage"] == full["usage"]
    single = await fake.send("chat", _chat(**extra))
    assert full["usage"]["completion_tokens"] == 3 * single["usage"]["completion_tokens"]


async def test_a_list_of_prompts_gets_n_choices_per_prompt(fake):
    """From a new-user pass: the legacy API answers every prompt of a list (choice
    ``i * n + j`` is the ``j``-th answer to prompt ``i``, as OpenAI and vLLM do); the fake
    answered ``["a", "b"]`` with one choice to the prompts joined."""
    body = {"model": "demo", "prompt": ["first prompt", "second one"], "n": 2}
    full = await fake.send("completion", body)
    texts = [c["text"] for c in full["choices"]]
    assert [c["index"] for c in full["choices"]] == [0, 1, 2, 3]
    assert texts[0] == texts[1] and texts[2] == texts[3] and texts[0] != texts[2]
    assert texts[0].endswith("first prompt") and texts[2].endswith("second one")
    singles = [await fake.send("completion", {"model": "demo", "prompt": p}) for p in body["prompt"]]
    assert full["usage"]["prompt_tokens"] == sum(s["usage"]["prompt_tokens"] for s in singles)
    assert full["usage"]["completion_tokens"] == 2 * sum(s["usage"]["completion_tokens"] for s in singles)
    chunks = [c async for c in fake.stream("completion", body)]
    streamed: dict[int, str] = {}
    for ch in chunks:
        for c in ch["choices"]:
            streamed[c["index"]] = streamed.get(c["index"], "") + c["text"]
    assert streamed == dict(enumerate(texts)) and chunks[-1]["usage"] == full["usage"]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory) -> Iterator[Gateway]:
    gw = start_gateway(tmp_path_factory.mktemp("fake"))
    yield gw
    gw.stop()


def _sse(response: httpx.Response) -> list[dict]:
    return [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")]


def test_http_stream_with_n_reaches_the_client_for_every_index(gateway):
    body = {"model": "auto", "messages": [USER], "n": 2, "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", gateway.v1 + "/chat/completions", json=body, timeout=30) as r:
        assert r.status_code == 200
        chunks = _sse(r)
    texts = _texts([c for c in chunks if c["choices"]])
    assert set(texts) == {0, 1} and texts[0] == texts[1] and texts[0]
    plain_body = {k: v for k, v in body.items() if k != "stream_options"}
    plain = httpx.post(gateway.v1 + "/chat/completions", json={**plain_body, "stream": False}, timeout=30).json()
    assert chunks[-1]["usage"]["completion_tokens"] == plain["usage"]["completion_tokens"]


def test_http_agent_loop_terminates(gateway):
    from openai import OpenAI

    client = OpenAI(base_url=gateway.v1, api_key="unused", max_retries=0)
    messages: list = [{"role": "user", "content": "What is the weather in Paris?"}]
    for _ in range(3):
        reply = client.chat.completions.create(model="auto", messages=messages, tools=TOOLS).choices[0]
        if reply.finish_reason != "tool_calls":
            break
        messages.append(reply.message.model_dump(exclude_none=True))
        messages += [{"role": "tool", "tool_call_id": c.id, "content": "Sunny"} for c in reply.message.tool_calls]
    assert reply.finish_reason == "stop" and "Sunny" in reply.message.content
    assert len(messages) == 3


def test_http_limits_and_formats(gateway):
    from openai import OpenAI

    client = OpenAI(base_url=gateway.v1, api_key="unused", max_retries=0)
    cut = client.chat.completions.create(model="auto", messages=[USER], max_completion_tokens=4).choices[0]
    assert cut.finish_reason == "length" and estimate_tokens(cut.message.content) <= 4
    stopped = client.chat.completions.create(model="auto", messages=[USER], stop=["STOPHERE"]).choices[0]
    assert "STOPHERE" not in stopped.message.content
    fmt = {"type": "json_schema", "json_schema": {"name": "thing", "schema": SCHEMA, "strict": True}}
    structured = client.chat.completions.create(model="auto", messages=[USER], response_format=fmt)
    assert set(json.loads(structured.choices[0].message.content)) == set(SCHEMA["properties"])
