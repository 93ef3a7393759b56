"""Schemathesis against the Messages door over HTTP: bodies drawn from the OpenAPI schema
that ``/v1/messages`` and ``/v1/messages/count_tokens`` declare never get a 5xx, and every
refusal is in Anthropic's envelope."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from tests.gateway.conftest import start_gateway


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    gw = start_gateway(tmp_path_factory.mktemp("messages-fuzz"))
    yield gw
    gw.stop()


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
def test_no_server_error_and_anthropic_envelopes(gateway, path):
    schema = schemathesis.openapi.from_url(gateway.url + "/openapi.json")
    operation = schema[path]["POST"]

    @settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy())
    def check(case):
        resp = case.call(base_url=gateway.url)
        assert resp.status_code < 500, (case.body, resp.text)
        if resp.status_code >= 400:
            body = resp.json()
            assert body["type"] == "error" and isinstance(body["error"]["message"], str), body

    check()
