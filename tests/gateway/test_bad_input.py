"""Bad input always gets the OpenAI error envelope with the right status, never a trace."""

from __future__ import annotations

import httpx
import pytest

from tests.gateway.conftest import start_gateway

MSG = [{"role": "user", "content": "hi"}]


def _assert_envelope(resp: httpx.Response, status: int, code: str | None = None, param: str | None = None):
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["message"] and "Traceback" not in err["message"]
    if code is not None:
        assert err["code"] == code
    if param is not None:
        assert err["param"] == param
    return err


@pytest.mark.parametrize("body, status, code, param", [
    (b"{", 400, "invalid_json", None),
    (b"", 400, "invalid_json", None),
    (b"[1, 2]", 400, "invalid_json", None),
    (b"\xff\xfe{}", 400, "invalid_encoding", None),
    (b'{"model": "auto"}', 400, "missing_required_parameter", "messages"),
    (b'{"messages": []}', 400, "invalid_value", "messages"),
    (b'{"messages": "hello"}', 400, "invalid_value", "messages"),
    (b'{"messages": [{"role": "robot", "content": "x"}]}', 400, "invalid_value", "messages.0.role"),
    (b'{"messages": [{"content": "x"}]}', 400, "missing_required_parameter", "messages.0.role"),
    (b'{"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}', 400, "invalid_value", "temperature"),
    (b'{"messages": [{"role": "user", "content": "x"}], "n": 0}', 400, "invalid_value", "n"),
    (b'{"messages": [{"role": "user", "content": "x"}], "stream": "yes"}', 400, "invalid_value", "stream"),
    (b'{"model": "gpt5", "messages": [{"role": "user", "content": "x"}]}', 404, "model_not_found", "model"),
    (b'{"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}', 400, "invalid_value",
     "messages.0.content.0.text"),
    (b'{"messages": [{"role": "system", "content": [{"type": "text", "text": null}]}, {"role": "user", '
     b'"content": "x"}]}', 400, "invalid_value", "messages.0.content.0.text"),
    (b'{"messages": [{"role": "user", "content": [{"type": "text"}]}]}', 400, "invalid_value",
     "messages.0.content.0.text"),
    (b'{"messages": [{"role": "user", "content": [{"text": "x"}]}]}', 400, "invalid_value",
     "messages.0.content.0.type"),
    (b'{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "a"}}],'
     b' "tool_choice": {"type": "function", "function": {"name": {"a": 1}}}}', 400, "invalid_value", "tool_choice"),
    (b'{"messages": [{"role": "user", "content": ["a", "b"]}]}', 400, "invalid_value", "messages.0.content.0"),
    (b'{"messages": [{"role": "user", "content": "x", "name": 5}]}', 400, "invalid_value", "messages.0.name"),
    (b'{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}', 400, "invalid_value",
     "tools.0.function"),
    (b'{"messages": [{"role": "user", "content": "x"}], "tools": [{"function": {"name": "f"}}]}', 400,
     "invalid_value", "tools.0.type"),
    (b'{"messages": [{"role": "user", "content": "x"}], "stream_options": {"include_usage": true}}', 400,
     "invalid_value", "stream_options"),
    (b'{"messages": [{"role": "user", "content": "x"}], "stream": true, "stream_options": {"include_usage": "yes"}}',
     400, "invalid_value", "stream_options.include_usage"),
    (b'{"messages": [{"role": "user", "content": "x"}], "stream": true, "stream_options": [true]}', 400,
     "invalid_value", "stream_options"),
    (b'{"messages": [{"role": "user", "content": "x"}], "best_of": 0}', 400, "invalid_value", "best_of"),
    (b'{"messages": [{"role": "user", "content": "x"}], "best_of": "x"}', 400, "invalid_value", "best_of"),
    (b'{"messages": [{"role": "user", "content": "x"}], "function_call": "auto"}', 400, "invalid_value",
     "function_call"),
    (b'{"messages": [{"role": "user", "content": "x"}], "foo": ' + b"[" * 300 + b"]" * 300 + b"}", 400,
     "invalid_json", None),
])
def test_chat_bad_bodies(demo_gateway, body, status, code, param):
    resp = httpx.post(demo_gateway.v1 + "/chat/completions", content=body,
                      headers={"content-type": "application/json"})
    err = _assert_envelope(resp, status, code, param)
    assert err["type"] == "invalid_request_error"


def test_an_unknown_model_name_is_not_echoed_in_full(demo_gateway):
    resp = httpx.post(demo_gateway.v1 + "/chat/completions", json={"model": "m" * 100_000, "messages": MSG})
    err = _assert_envelope(resp, 404, "model_not_found", "model")
    assert len(err["message"]) < 1000 and "..." in err["message"]
    resp = httpx.get(demo_gateway.v1 + "/models/" + "m" * 5000)
    assert resp.status_code == 404 and len(resp.text) < 1500


def test_error_messages_name_no_internal_classes(demo_gateway):
    for field in ("stream_options", "response_format"):
        body = {"messages": MSG, "stream": True, field: [1]}
        err = _assert_envelope(httpx.post(demo_gateway.v1 + "/chat/completions", json=body), 400, param=field)
        assert "instance of" not in err["message"] and "valid dictionary" in err["message"]


def test_a_tool_whose_name_is_not_a_string_is_not_a_500(demo_gateway):
    body = {"messages": MSG, "tools": [{"type": "function", "function": {"name": ["x"]}}], "tool_choice": "required"}
    assert httpx.post(demo_gateway.v1 + "/chat/completions", json=body).status_code < 500


def test_deep_but_allowed_nesting_and_null_stream_are_fine(demo_gateway):
    body = b'{"messages": [{"role": "user", "content": "x"}], "stream": null, "foo": ' + b"[" * 120 + b"]" * 120 + b"}"
    for path in ("/route", "/chat/completions"):
        resp = httpx.post(demo_gateway.v1 + path, content=body, headers={"content-type": "application/json"})
        assert resp.status_code == 200, resp.text


def test_image_parts_pass_and_text_parts_are_read(demo_gateway):
    """Non-text parts are forwarded as sent; text parts count as prompt text."""
    body = {"messages": [{"role": "user", "content": [
        {"type": "text", "text": "describe this"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]}]}
    resp = httpx.post(demo_gateway.v1 + "/chat/completions", json=body)
    assert resp.status_code == 200, resp.text


def test_in_range_sampling_parameters_pass(demo_gateway):
    body = {"messages": MSG, "logprobs": True, "top_logprobs": 20, "logit_bias": {"50256": -100, "11": 2.5},
            "presence_penalty": -2, "frequency_penalty": 2}
    resp = httpx.post(demo_gateway.v1 + "/chat/completions", json=body)
    assert resp.status_code == 200, resp.text


def test_legacy_completions_logprobs_is_a_small_count(demo_gateway):
    for bad in (True, 21, -1, "5"):
        resp = httpx.post(demo_gateway.v1 + "/completions", json={"prompt": "hi", "logprobs": bad})
        assert _assert_envelope(resp, 400)["param"] == "logprobs"
    assert httpx.post(demo_gateway.v1 + "/completions", json={"prompt": "hi", "logprobs": 5}).status_code == 200


def test_completions_take_at_most_2048_prompts(demo_gateway):
    """From a fresh-user pass: 1,000 prompts x n=128 gave 128,000 choices (15 MB; on a hosted
    backend, 128,000 paid completions). The OpenAI API takes at most 2048 prompts."""
    resp = httpx.post(demo_gateway.v1 + "/completions", json={"model": "auto", "prompt": ["x"] * 2049}, timeout=30)
    err = _assert_envelope(resp, 400, "invalid_value", "prompt")
    assert "has 2049 prompts; at most 2048" in err["message"]
    ok = httpx.post(demo_gateway.v1 + "/completions", json={"model": "auto", "prompt": ["x"] * 3}, timeout=30)
    assert ok.status_code == 200 and len(ok.json()["choices"]) == 3


def test_completions_missing_prompt(demo_gateway):
    _assert_envelope(httpx.post(demo_gateway.v1 + "/completions", json={"model": "auto"}), 400,
                     "missing_required_parameter", "prompt")


@pytest.mark.parametrize("path", ["/chat/completions", "/completions", "/feedback"])
def test_a_compressed_body_is_415_not_a_utf8_error(demo_gateway, path):
    import gzip

    body = gzip.compress(b'{"model": "auto", "messages": [{"role": "user", "content": "hi"}]}')
    resp = httpx.post(demo_gateway.v1 + path, content=body,
                      headers={"content-type": "application/json", "content-encoding": "gzip"})
    err = _assert_envelope(resp, 415, "unsupported_content_encoding")
    assert "'gzip' is not supported" in err["message"]
    plain = httpx.post(demo_gateway.v1 + "/chat/completions", json={"model": "auto", "messages": MSG},
                       headers={"content-encoding": "identity"})
    assert plain.status_code == 200, plain.text


def test_unknown_path_and_method(demo_gateway):
    _assert_envelope(httpx.get(demo_gateway.v1 + "/nothing-here"), 404)
    _assert_envelope(httpx.get(demo_gateway.v1 + "/chat/completions"), 405)


def test_body_over_limit(tmp_path):
    gw = start_gateway(tmp_path, max_body_bytes=1000)
    try:
        big = {"messages": [{"role": "user", "content": "x" * 2000}]}
        _assert_envelope(httpx.post(gw.v1 + "/chat/completions", json=big), 413, "request_too_large")

        def chunked():
            yield b'{"messages": [{"role": "user", "content": "'
            for _ in range(10):
                yield b"y" * 200
            yield b'"}]}'

        _assert_envelope(httpx.post(gw.v1 + "/chat/completions", content=chunked(),
                                    headers={"content-type": "application/json"}), 413, "request_too_large")
        ok = httpx.post(gw.v1 + "/chat/completions", json={"messages": MSG})
        assert ok.status_code == 200
    finally:
        gw.stop()


def test_emoji_and_non_english_are_fine(demo_gateway):
    resp = httpx.post(demo_gateway.v1 + "/chat/completions",
                      json={"messages": [{"role": "user", "content": "Bonjour 👋 你好 مرحبا"}]})
    assert resp.status_code == 200
    assert "你好" in resp.json()["choices"][0]["message"]["content"]


@pytest.mark.parametrize("body, param, fragment", [
    ({"messages": [{"role": "user", "content": None}]}, "messages.0", "needs 'content'"),
    ({"messages": [{"role": "user"}]}, "messages.0", "a 'user' message needs 'content'"),
    ({"messages": [{"role": "tool", "content": "42"}]}, "messages.0", "tool_call_id"),
    ({"messages": MSG, "tool_choice": "required"}, "tool_choice", "no 'tools'"),
    ({"messages": MSG, "tools": [{"type": "function", "function": {"name": "a"}}],
      "tool_choice": {"type": "function", "function": {"name": "b"}}}, "tool_choice", "'b'"),
    ({"messages": MSG, "response_format": {"type": "xml"}}, "response_format.type", "json_object"),
    ({"messages": MSG, "response_format": {"type": "json_schema", "json_schema": 5}},
     "response_format.json_schema", "valid dictionary"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages.0.content", ""),
    ({"messages": MSG, "stop": 7}, "stop", ""),
    ({"messages": MSG, "top_logprobs": 5}, "top_logprobs", "'logprobs': true"),
    ({"messages": MSG, "logprobs": True, "top_logprobs": 21}, "top_logprobs", "20"),
    ({"messages": MSG, "logit_bias": {"abc": 1}}, "logit_bias", "token ids"),
    ({"messages": MSG, "logit_bias": {"-1": 1}}, "logit_bias", "token ids"),
    ({"messages": MSG, "logit_bias": {"99999999999999999999999": 1}}, "logit_bias", "token ids"),
    ({"messages": MSG, "logit_bias": {"50256": -1000}}, "logit_bias", "between -100 and 100"),
    ({"messages": MSG, "logit_bias": {"50256": "x"}}, "logit_bias.50256", ""),
    ({"messages": MSG, "presence_penalty": 3}, "presence_penalty", "2"),
    ({"messages": MSG, "frequency_penalty": -2.5}, "frequency_penalty", "-2"),
])
def test_openai_semantics(demo_gateway, body, param, fragment):
    resp = httpx.post(demo_gateway.v1 + "/chat/completions", json=body)
    err = _assert_envelope(resp, 400)
    assert (err["param"] or "") == param, err
    assert fragment in err["message"]
    assert ".str" not in (err["param"] or "") and "list[" not in (err["param"] or "")


def test_tool_schemas_the_client_got_wrong_are_answered_not_a_500(demo_gateway):
    """Parameters that are not an object are refused (OpenAI's spec: an object); an object
    that is not valid JSON Schema is the provider's to judge (the rewriter leaves such tools
    as sent and notes it), and the simulated backend answers with an object of arguments."""
    import json

    for params in ("notanobject", [1, 2]):
        body = {"messages": MSG, "tools": [{"type": "function", "function": {"name": "f", "parameters": params}}]}
        _assert_envelope(httpx.post(demo_gateway.v1 + "/chat/completions", json=body), 400,
                         code="invalid_value", param="tools.0.function.parameters")
    fn = {"name": "f", "parameters": {"type": "nonsense", "properties": 5}}
    body = {"messages": MSG, "tools": [{"type": "function", "function": fn}], "tool_choice": "required"}
    resp = httpx.post(demo_gateway.v1 + "/chat/completions", json=body)
    assert resp.status_code == 200, resp.text
    call = resp.json()["choices"][0]["message"]["tool_calls"][0]["function"]
    assert isinstance(json.loads(call["arguments"]), dict)
    resp = httpx.post(demo_gateway.v1 + "/chat/completions", json={"messages": MSG, "tool_choice": "required"})
    assert "Value error" not in resp.json()["error"]["message"]
    nameless = {"messages": MSG, "tools": [{"type": "function", "function": {"parameters": {}}}]}
    _assert_envelope(httpx.post(demo_gateway.v1 + "/chat/completions", json=nameless), 400,
                     param="tools.0.function.name")


def test_assistant_tool_call_without_content_is_fine(demo_gateway):
    msgs = [{"role": "user", "content": "weather?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]
    assert httpx.post(demo_gateway.v1 + "/chat/completions", json={"messages": msgs}).status_code == 200


def test_prompt_beyond_every_context_window(demo_gateway):
    # ~262k estimated tokens: more than the demo models' 128k/131k windows.
    resp = httpx.post(demo_gateway.v1 + "/chat/completions",
                      json={"messages": [{"role": "user", "content": "x" * 1_048_000}]})
    err = _assert_envelope(resp, 400, "context_length_exceeded", "messages")
    assert "context window" in err["message"]


def test_a_pinned_backend_checks_its_own_context_window(demo_gateway):
    """Naming a backend skips routing but not the context check (it answered 200 to a
    prompt of ~262k tokens for a 131k-token model)."""
    resp = httpx.post(demo_gateway.v1 + "/chat/completions",
                      json={"model": "llama-3.1-8b-instruct", "messages": [{"role": "user", "content": "x" * 1_048_000}]})
    err = _assert_envelope(resp, 400, "context_length_exceeded", "messages")
    assert "backend 'llama-3.1-8b-instruct' (131072 tokens)" in err["message"]
    ok = httpx.post(demo_gateway.v1 + "/chat/completions",
                    json={"model": "llama-3.1-8b-instruct", "messages": [{"role": "user", "content": "hi"}]})
    assert ok.status_code == 200


def test_the_override_header_without_the_admin_key_is_refused(demo_gateway):
    """It used to be ignored silently: the client believed its override took effect."""
    resp = httpx.post(demo_gateway.v1 + "/chat/completions", json={"messages": MSG},
                      headers={"x-mixroute-backend-override": "gpt-4o"})
    err = _assert_envelope(resp, 403, "override_not_allowed", "x-mixroute-backend-override")
    assert "admin key" in err["message"]


@pytest.mark.parametrize("ctype", ["text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
                                   "multipart/form-data; boundary=x", None, "", "application/octet-stream"])
def test_with_auth_off_only_json_bodies_are_taken(demo_gateway, ctype):
    """A web page can POST simple content types, or a body with no Content-Type (an untyped
    Blob, a beacon), cross-site without a CORS preflight: with auth off that would let any
    page spend the local gateway's backends; JSON (which needs a preflight) still works."""
    body = b'{"messages": [{"role": "user", "content": "hi"}]}'
    headers = {} if ctype is None else {"content-type": ctype}
    with httpx.Client() as client:
        request = client.build_request("POST", demo_gateway.v1 + "/chat/completions", content=body, headers=headers)
        assert ctype is not None or "content-type" not in request.headers
        resp = client.send(request)
    err = _assert_envelope(resp, 415, "unsupported_media_type", "content-type")
    assert "application/json" in err["message"]
    for good in ("application/json", "application/json; charset=utf-8", "application/vnd.api+json"):
        assert httpx.post(demo_gateway.v1 + "/chat/completions", content=body,
                          headers={"content-type": good}).status_code == 200


def test_with_auth_off_feedback_takes_only_json_bodies(demo_gateway):
    """Feedback feeds `policy what-if`: a web page must not write it cross-site either."""
    body = b'{"request_id": "x", "score": 1}'
    resp = httpx.post(demo_gateway.v1 + "/feedback", content=body, headers={"content-type": "text/plain"})
    _assert_envelope(resp, 415, "unsupported_media_type", "content-type")
    resp = httpx.post(demo_gateway.v1 + "/feedback", content=body, headers={"content-type": "application/json"})
    assert resp.status_code == 202  # JSON is read (and accepted: an unknown request id is dropped later)


def test_an_authorization_header_that_is_not_bearer_is_named(tmp_path):
    """From a new-user pass: `Authorization: Basic ...` or the bare key without `Bearer` was
    answered 'Missing API key', though the client had sent one (in the wrong form)."""
    from gateway.auth.keys import create_key
    from gateway.store.db import make_engine, upgrade

    db = f"sqlite:///{tmp_path}/keys.db"
    engine = make_engine(db)
    upgrade(engine)
    key, _ = create_key(engine, tenant="acme")
    engine.dispose()
    gw = start_gateway(tmp_path, database_url=db)
    try:
        for header in (f"Basic {key}", key, "Bearer"):
            resp = httpx.post(gw.v1 + "/chat/completions", json={"messages": MSG}, headers={"authorization": header})
            err = _assert_envelope(resp, 401, "invalid_api_key")
            assert "Missing" not in err["message"] and "Bearer <key>" in err["message"], err
            assert key not in resp.text
        missing = _assert_envelope(httpx.post(gw.v1 + "/chat/completions", json={"messages": MSG}), 401)
        assert missing["message"].startswith("Missing API key")
        ok = httpx.post(gw.v1 + "/chat/completions", json={"messages": MSG}, headers={"authorization": f"Bearer {key}"})
        assert ok.status_code == 200
    finally:
        gw.stop()


def test_a_when_header_rule_fires_on_any_header_name(tmp_path):
    """From a fresh-user pass: rules saw only x-mixroute-* headers, so `when_header:
    x-priority` validated (its own error message suggests that name) and never fired."""
    policy = """version: 1
backends:
  - {name: big, kind: fake, model: big-model}
routes:
  - {name: auto, backends: [big]}
rules:
  - {name: priority-block, when_header: X-Priority, block: true}
"""
    gw = start_gateway(tmp_path, policy)
    try:
        body = {"model": "auto", "messages": MSG}
        blocked = httpx.post(gw.v1 + "/chat/completions", json=body, headers={"x-priority": "high"}, timeout=10)
        _assert_envelope(blocked, 400, "prompt_blocked")
        assert httpx.post(gw.v1 + "/chat/completions", json=body, timeout=10).status_code == 200
    finally:
        gw.stop()


def test_route_dry_runs_a_legacy_completions_body(demo_gateway):
    """``/v1/route`` takes what ``/v1/completions`` takes (``prompt``, no ``messages``), and
    refuses what it refuses, with the same envelope."""
    resp = httpx.post(demo_gateway.v1 + "/route", json={"model": "auto", "prompt": "Say hi", "max_tokens": 5})
    assert resp.status_code == 200, resp.text
    out = resp.json()
    assert out["endpoint"] == "completions" and out["chosen"] and out["rewritten_request"]["prompt"] == "Say hi"
    chat = httpx.post(demo_gateway.v1 + "/route", json={"model": "auto", "messages": MSG}).json()
    assert chat["endpoint"] == "chat"
    _assert_envelope(httpx.post(demo_gateway.v1 + "/route", json={"prompt": "hi", "logprobs": 99}), 400, param="logprobs")
    _assert_envelope(httpx.post(demo_gateway.v1 + "/route", json={"model": "auto"}), 400, param="messages")
    both = {"model": "auto", "prompt": "hi", "messages": MSG}  # /v1/completions and chat route it differently
    _assert_envelope(httpx.post(demo_gateway.v1 + "/route", json=both), 400, code="ambiguous_body", param="prompt")


def test_a_legacy_prompt_too_long_for_every_backend_blames_prompt(demo_gateway):
    """The gateway's own context check named ``messages`` for a completions body."""
    long = "word " * 600_000
    for path in ("/completions", "/route"):
        _assert_envelope(httpx.post(demo_gateway.v1 + path, json={"model": "auto", "prompt": long}, timeout=60),
                         400, code="context_length_exceeded", param="prompt")
    _assert_envelope(httpx.post(demo_gateway.v1 + "/chat/completions", timeout=60,
                                json={"model": "auto", "messages": [{"role": "user", "content": long}]}),
                     400, code="context_length_exceeded", param="messages")
