"""Credentials never reach a client or the log: an upstream that fails and echoes the
``Authorization`` header, the ``user:password`` pair and the URL once showed basic-auth
credentials of a ``vllm`` endpoint (``http://user:password@host/v1``) in the 502 body and in a
stream's error event. Driven against a real gateway and a real failing HTTP upstream, for the
``vllm`` kind (URL user info) and the ``hosted`` kind (its API key; litellm refuses user info
in ``api_base``, "Cannot combine AUTHORIZATION header with ... credentials encoded in URL", so
none is ever sent, and the redactor's masking of it is checked on its own)."""

from __future__ import annotations

import base64
import logging

import httpx
import orjson
import pytest

from bench.leaky_upstream import serve_in_thread
from tests.gateway.conftest import start_gateway

USER, PASSWORD = "gw-user", "pw-S3cr3t-9f2"
TOKEN = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
API_KEY = "sk-hosted-Key-77c1"
SECRETS = (PASSWORD, TOKEN, f"{USER}:{PASSWORD}", API_KEY)


@pytest.fixture(scope="module")
def leaky():
    server = serve_in_thread()
    yield server
    server.stop()


def _policy(kind: str, leaky) -> str:
    if kind == "vllm":
        where = f'endpoints: ["{leaky.v1(USER, PASSWORD)}"], options: {{metrics_interval_s: 0}}'
    else:
        where = f'api_base: "http://127.0.0.1:{leaky.port}/v1", api_key: {API_KEY}'
    model = "leaky" if kind == "vllm" else "openai/leaky"
    return f"""version: 1
backends:
  - {{name: up, kind: {kind}, model: {model}, {where}, pricing: {{input_per_1m: 1, output_per_1m: 1}}}}
routes:
  - {{name: auto, backends: [up]}}
"""


def _assert_clean(text: str, where: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"{where} shows {secret!r}: {text[:600]}"


@pytest.mark.parametrize("kind", ["vllm", "hosted"])
def test_a_failing_upstream_never_shows_url_credentials(tmp_path, leaky, kind, caplog):
    caplog.set_level(logging.DEBUG)
    leaky.authorizations.clear()
    gw = start_gateway(tmp_path, _policy(kind, leaky))
    try:
        body = {"messages": [{"role": "user", "content": "hi"}]}
        resp = httpx.post(gw.v1 + "/chat/completions", json=body, timeout=30)
        assert resp.status_code == 502, resp.text
        message = resp.json()["error"]["message"]
        assert "upstream refused the request" in message  # the upstream's text is shown, masked
        _assert_clean(resp.text, "the 502 body")

        with httpx.stream("POST", gw.v1 + "/chat/completions", json={**body, "stream": True}, timeout=30) as streamed:
            assert streamed.status_code == 200
            events = [line[6:] for line in streamed.iter_lines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        error = orjson.loads(events[-2])["error"]
        assert error["code"] == "upstream_stream_error" and "upstream refused the request" in error["message"]
        _assert_clean("\n".join(events), "the stream's error event")
    finally:
        gw.stop()
    # The upstream did get the credentials: the test would prove nothing otherwise.
    assert (f"Basic {TOKEN}" if kind == "vllm" else f"Bearer {API_KEY}") in leaky.authorizations
    _assert_clean("\n".join(r.getMessage() for r in caplog.records), "the log")


def test_the_redactor_masks_every_form_of_url_user_info_and_keys():
    from backends.config import BackendConfig
    from backends.credentials import Redactor

    config = BackendConfig(name="h", kind="hosted", model="openai/x", api_key=API_KEY,
                           api_base=f"https://{USER}:{PASSWORD.replace('-', '%2D')}@api.example/v1")
    redact = Redactor.for_config(config)
    text = (f"GET https://{USER}:{PASSWORD.replace('-', '%2D')}@api.example/v1 failed; Authorization: Basic {TOKEN}; "
            f"{USER}:{PASSWORD}; key {API_KEY}; ftp://other:secret@host/ and 'bearer abcdef123456'")
    shown = redact(text)
    _assert_clean(shown, "the redacted text")
    assert "other:secret" not in shown and "abcdef123456" not in shown
    assert "api.example/v1 failed" in shown  # the rest of the message stays readable
