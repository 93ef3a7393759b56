"""Sessions over HTTP: a conversation found by its prefix lineage or named by the client
stays on the backend that holds its prefix, across gateway replicas sharing Redis; session
ids are checked and tenant-scoped."""

from __future__ import annotations

import json
import os
import socket
import uuid

import httpx
import pytest

from gateway.auth.keys import create_key
from gateway.store.db import make_engine, upgrade
from tests.conftest import redis_test_prefix
from tests.gateway.conftest import start_gateway, wait_row

REDIS_URL = os.environ.get("MIXROUTE_TEST_REDIS_URL")
# Alone, every turn goes to `mid` (the cheapest above the bar); the x-escalate header leaves
# only `strong`, so a conversation that starts there shows whether later turns stay.
POLICY = """version: 1
backends:
  - {name: strong, kind: fake, model: strong-model, quality: 0.90, pricing: {input_per_1m: 10, output_per_1m: 30}}
  - {name: mid, kind: fake, model: mid-model, quality: 0.86, pricing: {input_per_1m: 1, output_per_1m: 3}}
routes:
  - {name: auto, backends: [strong, mid], quality_bar: {target: 0.95}}
  - {name: solo, backends: [strong, mid], quality_bar: {target: 0.95}, session: {enabled: false}}
rules:
  - {name: escalate, when_header: x-escalate, allow_backends: [strong]}
"""
SYSTEM = {"role": "system", "content": "You are a careful coding agent. " * 40}


def _chat(gw, messages, headers=None, model="auto"):
    resp = httpx.post(gw.v1 + "/chat/completions", json={"model": model, "messages": messages},
                      headers=headers or {}, timeout=30)
    assert resp.status_code == 200, resp.text
    return resp


def _session_of(gw, resp) -> dict:
    row = wait_row(gw.settings.database_url, "decisions", resp.headers["x-mixroute-request-id"])
    signals = row["signals"] if isinstance(row["signals"], dict) else json.loads(row["signals"])
    return signals.get("session") or {}


def _next_turn(messages, resp, text):
    answer = resp.json()["choices"][0]["message"]["content"]
    return [*messages, {"role": "assistant", "content": answer}, {"role": "user", "content": text}]


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    gateway = start_gateway(tmp_path_factory.mktemp("sessions"), POLICY)
    yield gateway
    gateway.stop()


def test_a_conversation_found_by_its_lineage_stays_on_its_backend(gw):
    messages = [SYSTEM, {"role": "user", "content": f"Refactor module {uuid.uuid4().hex}"}]
    first = _chat(gw, messages, {"x-escalate": "1"})
    assert first.headers["x-mixroute-backend"] == "strong"
    session = _session_of(gw, first)
    assert session["turn"] == 1 and session["on"] is None and not session["explicit"]
    messages = _next_turn(messages, first, "Now add tests.")
    second = _chat(gw, messages)
    assert second.headers["x-mixroute-backend"] == "strong"  # alone it would go to mid
    assert second.headers["x-mixroute-reason"] == "session_kept"
    s2 = _session_of(gw, second)
    assert s2["id"] == session["id"] and s2["turn"] == 2 and s2["on"] == "strong"
    assert s2["switch"]["move_to"] == "mid" and s2["switch"]["stay_usd"] > s2["switch"]["move_usd"]
    # A tool round trip extends the lineage too (assistant tool call + tool result).
    messages = [*_next_turn(messages, second, "Run them.")]
    third = _chat(gw, messages)
    assert _session_of(gw, third)["turn"] == 3


def test_an_unrelated_prompt_starts_its_own_session(gw):
    resp = _chat(gw, [SYSTEM, {"role": "user", "content": f"Something else {uuid.uuid4().hex}"}])
    assert resp.headers["x-mixroute-backend"] == "mid"
    assert _session_of(gw, resp)["turn"] == 1


def test_a_route_with_sessions_off_decides_each_request_alone(gw):
    messages = [SYSTEM, {"role": "user", "content": f"Solo {uuid.uuid4().hex}"}]
    first = _chat(gw, messages, {"x-escalate": "1"}, model="solo")
    second = _chat(gw, _next_turn(messages, first, "more"), model="solo")
    assert second.headers["x-mixroute-backend"] == "mid" and _session_of(gw, second) == {}


def test_an_explicit_session_header_and_prompt_cache_key(gw):
    sid = f"conv-{uuid.uuid4().hex}"
    first = _chat(gw, [{"role": "user", "content": "start"}], {"x-escalate": "1", "x-mixroute-session": sid})
    other = _chat(gw, [{"role": "user", "content": "a different opening"}], {"x-mixroute-session": sid})
    assert other.headers["x-mixroute-backend"] == "strong"
    s = _session_of(gw, other)
    assert s["id"] == sid and s["turn"] == 2 and s["explicit"]
    key = uuid.uuid4().hex
    resp = httpx.post(gw.v1 + "/chat/completions", json={"model": "auto", "prompt_cache_key": key,
                                                         "messages": [{"role": "user", "content": "x"}]}, timeout=30)
    assert _session_of(gw, resp)["id"] == f"prompt_cache_key:{key}"
    assert first.status_code == 200


def test_route_dry_run_shows_the_session_and_its_switch_pricing(gw):
    sid = f"dry-{uuid.uuid4().hex}"
    _chat(gw, [{"role": "user", "content": "start"}], {"x-escalate": "1", "x-mixroute-session": sid})
    dry = httpx.post(gw.v1 + "/route", json={"messages": [{"role": "user", "content": "next"}]},
                     headers={"x-mixroute-session": sid}, timeout=30).json()
    assert dry["chosen"] == "strong" and dry["reason"] == "session_kept"
    assert dry["signals"]["session"]["switch"]["move_to"] == "mid"


def _raw_request(gw, header_value: bytes) -> bytes:
    host, port = gw.url.removeprefix("http://").split(":")
    body = b'{"model": "auto", "messages": [{"role": "user", "content": "hi"}]}'
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\n"
                     b"x-mixroute-session: " + header_value + b"\r\ncontent-length: " + str(len(body)).encode()
                     + b"\r\nconnection: close\r\n\r\n" + body)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return data


@pytest.mark.parametrize("value", [b"x" * 257, b"abc\x01def", b"tab\tbed"])
def test_a_bad_session_header_is_a_400_naming_it(gw, value):
    data = _raw_request(gw, value)
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400"), head
    if body != b"Invalid HTTP request received.":  # uvicorn refuses most control characters itself
        assert b'"param":"x-mixroute-session"' in body and b'"code":"invalid_session"' in body, body


def test_a_session_id_is_scoped_to_its_tenant(tmp_path):
    db = f"sqlite:///{tmp_path}/keys.db"
    engine = make_engine(db)
    upgrade(engine)
    key_a, _ = create_key(engine, tenant="acme")
    key_b, _ = create_key(engine, tenant="globex")
    engine.dispose()
    gateway = start_gateway(tmp_path, POLICY, database_url=db)
    try:
        sid = "shared-name"
        a = _chat(gateway, [{"role": "user", "content": "a"}],
                  {"authorization": f"Bearer {key_a}", "x-escalate": "1", "x-mixroute-session": sid})
        b = _chat(gateway, [{"role": "user", "content": "b"}],
                  {"authorization": f"Bearer {key_b}", "x-mixroute-session": sid})
        assert a.headers["x-mixroute-backend"] == "strong"
        assert b.headers["x-mixroute-backend"] == "mid"  # never joins acme's session
        assert _session_of(gateway, b)["turn"] == 1
    finally:
        gateway.stop()


@pytest.mark.skipif(not REDIS_URL, reason="MIXROUTE_TEST_REDIS_URL not set")
def test_two_gateways_sharing_redis_keep_one_session_on_one_backend(tmp_path):
    prefix = redis_test_prefix()
    gws = []
    for i in range(2):
        (tmp_path / f"g{i}").mkdir()
        gws.append(start_gateway(tmp_path / f"g{i}", POLICY, redis_url=REDIS_URL, redis_prefix=prefix))
    try:
        messages = [SYSTEM, {"role": "user", "content": f"Agent task {uuid.uuid4().hex}"}]
        resp = _chat(gws[0], messages, {"x-escalate": "1"})
        backends = [resp.headers["x-mixroute-backend"]]
        for turn in range(1, 6):  # turns alternate between the replicas
            messages = _next_turn(messages, resp, f"step {turn}")
            resp = _chat(gws[turn % 2], messages)
            backends.append(resp.headers["x-mixroute-backend"])
            assert _session_of(gws[turn % 2], resp)["turn"] == turn + 1
        assert backends == ["strong"] * 6
    finally:
        for g in gws:
            g.stop()
