"""The DNS-rebinding guard (:mod:`gateway.hosts`) on a real gateway: with auth off only
loopback ``Host`` names (and ``MIXROUTE_ALLOWED_HOSTS``) are served; with auth on, any."""

from __future__ import annotations

import httpx
import pytest

from gateway.hosts import allowed, host_name
from tests.gateway.conftest import start_gateway

CHAT = {"messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def open_gw(tmp_path_factory):
    gw = start_gateway(tmp_path_factory.mktemp("hosts-open"), allowed_hosts="gw.internal.example,*.corp.example")
    yield gw
    gw.stop()


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/dashboard/api/summary", "/v1/models", "/metrics"])
def test_a_rebound_name_is_refused_while_auth_is_off(open_gw, path) -> None:
    headers = {"host": "rebind.attacker.example:8000"}
    resp = (httpx.post(open_gw.url + path, json=CHAT, headers=headers) if path.endswith("completions")
            else httpx.get(open_gw.url + path, headers=headers))
    assert resp.status_code == 400, resp.text
    err = resp.json()["error"]
    assert (err["type"], err["code"], err["param"]) == ("invalid_request_error", "host_not_allowed", "host")


def test_the_messages_door_refuses_in_anthropic_envelope(open_gw) -> None:
    body = {"model": "auto", "max_tokens": 5, **CHAT}
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        resp = httpx.post(open_gw.url + path, json=body, headers={"host": "rebind.attacker.example"})
        assert resp.status_code == 400, resp.text
        got = resp.json()
        assert got["type"] == "error" and got["error"]["type"] == "invalid_request_error", got
        assert "rebind.attacker.example" in got["error"]["message"]


@pytest.mark.parametrize("host", ["localhost", "localhost:8000", "LOCALHOST:1", "127.0.0.1:9", "127.0.0.2",
                                  "[::1]:8000", "[::1]", "gw.internal.example:443", "a.corp.example"])
def test_loopback_and_listed_names_are_served(open_gw, host) -> None:
    resp = httpx.post(open_gw.url + "/v1/chat/completions", json=CHAT, headers={"host": host})
    assert resp.status_code == 200, resp.text


def test_with_auth_on_any_host_is_served(tmp_path) -> None:
    gw = start_gateway(tmp_path, admin_key="adm-hosts-0123456789")
    try:
        auth = {"authorization": "Bearer adm-hosts-0123456789", "host": "gateway.example.com"}
        assert httpx.post(gw.url + "/v1/chat/completions", json=CHAT, headers=auth).status_code == 200
        anon = httpx.post(gw.url + "/v1/chat/completions", json=CHAT, headers={"host": "gateway.example.com"})
        assert anon.status_code == 401
    finally:
        gw.stop()


def test_host_parsing() -> None:
    assert host_name("[::1]:8000") == "::1" and host_name("Example.COM:80") == "example.com"
    assert not allowed("corp.example", ("*.corp.example",))  # a wildcard needs a subdomain
    assert not allowed("localhost.attacker.example", ())
    assert allowed("anything.example", ("*",))
