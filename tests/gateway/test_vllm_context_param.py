"""vLLM answers a prompt beyond its context window with a 400 that names no ``param``; the
client still gets OpenAI's answer: ``context_length_exceeded`` blaming the field that holds
the prompt (``messages``, or ``prompt`` for legacy completions), streamed or not."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.gateway.conftest import Gateway, start_pool_gateway


@pytest.fixture(scope="module")
def gateway(upstream, tmp_path_factory) -> Iterator[Gateway]:
    gw = start_pool_gateway(tmp_path_factory.mktemp("vllm-context"), upstream, model="m-error-vllm-context")
    yield gw
    gw.stop()


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("path, body, param", [
    ("/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}, "messages"),
    ("/completions", {"prompt": "hi"}, "prompt"),
])
def test_vllms_context_error_blames_the_prompt_field(gateway, path, body, param, stream):
    resp = httpx.post(gateway.v1 + path, json={"model": "auto", **body, "stream": stream}, timeout=30)
    assert resp.status_code == 400, resp.text
    err = resp.json()["error"]
    assert (err["code"], err["param"], err["type"]) == ("context_length_exceeded", param, "invalid_request_error")
    assert "maximum context length is 4096 tokens" in err["message"]
