"""A vllm backend's ``endpoints`` at policy load (backends/endpoints.py): one replica per
address, whatever its spelling, and credentials kept out of every message."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from backends.endpoints import endpoint_key, shown
from router.policy.loader import PolicyError, parse_policy

POLICY = """version: 1
backends:
  - name: pool
    kind: vllm
    model: m
    endpoints:
      - {first}
      - {second}
routes:
  - name: auto
    backends: [pool]
"""


def _problem(first: str, second: str) -> str:
    with pytest.raises(PolicyError) as info:
        parse_policy(POLICY.format(first=first, second=second), source="policy.yaml")
    return str(info.value)


@pytest.mark.parametrize("first, second", [
    ("http://u:s3cret@vllm-0:8000/v1", "http://vllm-0:8000/v1"),
    ("http://vllm-0:8000/v1", "http://other:s3cret@vllm-0:8000/v1/"),
    ("http://vllm-0:8000/v1/", "http://VLLM-0:8000/v1"),
    ("http://vllm-0/v1", "http://vllm-0:80/v1"),
    ("https://vllm-0:443/v1", "https://:s3cret@Vllm-0/v1//"),
    # second break-it pass: empty and "." path segments, a trailing-dot host, IPv6 spellings
    ("http://vllm-0:8000/v1", "http://vllm-0:8000//v1"),
    ("http://vllm-0:8000/v1", "http://vllm-0:8000/./v1"),
    ("http://vllm-0:8000/v1", "http://vllm-0.:8000/v1"),
    ("http://[::1]:8000/v1", "http://[0:0:0:0:0:0:0:1]:8000/v1"),
    ("http://vllm-0:8000/v1", "HTTP://vllm-0:8000/v1"),
])
def test_endpoints_that_name_one_replica_are_a_duplicate(first, second):
    """From a break-it pass: entries differing only in user info, a trailing slash or the
    host's case passed the check, and the replica was counted (and exported) twice."""
    msg = _problem(first, second)
    assert msg.startswith("policy.yaml:7 backends[0].endpoints: endpoint "), msg
    assert "(endpoints[1]) is listed twice: it is the same replica as endpoints[0]" in msg
    assert "s3cret" not in msg


@pytest.mark.parametrize("second", ["http://vllm-0:8001/v1", "https://vllm-0:8000/v1", "http://vllm-1:8000/v1",
                                    "http://vllm-0:8000/a/v1"])
def test_endpoints_of_different_replicas_load(second):
    loaded = parse_policy(POLICY.format(first="http://u:p@vllm-0:8000/v1", second=second))
    assert loaded.policy.backends[0].endpoints == ["http://u:p@vllm-0:8000/v1", second]  # kept as written


@pytest.mark.parametrize("bad", ["http://u:s3cret@vllm-0:99999/v1", "http://u:s3cret@vllm-0:8000/v2",
                                 "http://u:s3cret@vllm-0:8000/v1?x=1", "ftp://u:s3cret@vllm-0/v1",
                                 "http://u:s3cret@/v1", "http://u:s3/cret@vllm-0/v1"])
def test_endpoint_problems_do_not_show_credentials(bad):
    msg = _problem(bad, "http://vllm-9:8000/v1")
    assert msg.startswith("policy.yaml:7 backends[0].endpoints[0]: endpoint '") and "***@" in msg, msg
    assert "s3" not in msg and "cret" not in msg
    if bad == "http://u:s3/cret@vllm-0/v1":  # '/' in the password reads as the end of the host
        assert "must be percent-encoded" in msg


def test_an_upper_case_scheme_is_a_url_like_any_other():
    loaded = parse_policy(POLICY.format(first="HTTP://vllm-0:8000/v1", second="Https://vllm-1:8000/v1"))
    assert loaded.policy.backends[0].endpoints == ["HTTP://vllm-0:8000/v1", "Https://vllm-1:8000/v1"]


@given(user=st.text("abc:%", max_size=6), host=st.sampled_from(["vllm-0", "VLLM-0", "Vllm-0"]),
       port=st.sampled_from(["", ":80"]), slashes=st.text("/", max_size=2))
def test_the_key_ignores_user_info_host_case_default_port_and_trailing_slashes(user, host, port, slashes):
    url = f"http://{user}@{host}{port}/v1{slashes}" if user else f"http://{host}{port}/v1{slashes}"
    assert endpoint_key(url) == ("http", "vllm-0", 80, "/v1")
    assert shown(url) == (f"http://***@{host}{port}/v1{slashes}" if user else url)


def test_user_info_and_an_api_key_together_are_an_error():
    """Both become the Authorization header; aiohttp refused every request and scrape
    (ValueError), so the pool ejected every replica."""
    text = POLICY.format(first="http://vllm-9:8000/v1", second="http://u:s3cret@vllm-0:8000/v1")
    with pytest.raises(PolicyError) as info:
        parse_policy(text.replace("    model: m\n", "    model: m\n    api_key: sk-x\n"), source="policy.yaml")
    msg = str(info.value)
    assert msg.startswith("policy.yaml:3 backends[0]: endpoint 'http://***@vllm-0:8000/v1' (endpoints[1]) has user "
                          "info"), msg
    assert "s3cret" not in msg
    assert parse_policy(text)  # without the key: basic auth only
