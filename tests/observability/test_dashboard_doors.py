"""Who may open the dashboard, and its sessions, on a real gateway: a login as soon as any
key exists, logout ending the cookie, the login's origin check and its throttle."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
import sqlalchemy as sa

from gateway.auth.keys import create_key
from gateway.dashboard.session import COOKIE
from tests.conftest import redis_test_prefix
from tests.observability.conftest import chat, start_gateway


def test_tenant_keys_without_an_admin_key_need_a_login(tmp_path) -> None:
    gw = start_gateway(tmp_path, key_cache_ttl_s=0)
    try:
        assert httpx.get(gw.url + "/dashboard/api/summary").status_code == 200  # auth off, loopback
        engine = sa.create_engine(gw.settings.database_url)
        key, _ = create_key(engine, "acme")
        engine.dispose()
        assert chat(gw, "acme asks", key=key).status_code == 200
        api = httpx.get(gw.url + "/dashboard/api/summary")
        assert api.status_code == 401 and api.json()["error"]["code"] == "dashboard_login_required"
        assert httpx.get(gw.url + "/dashboard").status_code == 303
        with httpx.Client(base_url=gw.url) as client:
            assert client.post("/dashboard/login", data={"key": key}).status_code == 303
            data = client.get("/dashboard/api/summary").json()
            assert data["viewer"] == {"admin": False, "tenant": "acme"}
    finally:
        gw.stop()


ADMIN = "adm-dash-doors-0123456789"


@pytest.fixture(scope="module")
def keyed_gw(tmp_path_factory):
    gw = start_gateway(tmp_path_factory.mktemp("dash-doors"), admin_key=ADMIN, dashboard_login_attempts=3)
    yield gw
    gw.stop()


@contextmanager
def _signed_in(gw) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gw.url) as client:
        assert client.post("/dashboard/login", data={"key": ADMIN}).status_code == 303
        yield client


def test_a_cookie_stops_working_after_logout(keyed_gw) -> None:
    with _signed_in(keyed_gw) as client:
        cookie = client.cookies[COOKIE]
        assert client.get("/dashboard/api/summary").status_code == 200
        assert client.post("/dashboard/logout").status_code == 303
    # A copy of the cookie kept from before the logout (stolen, or an old tab) is refused.
    replay = httpx.get(keyed_gw.url + "/dashboard/api/summary", cookies={COOKIE: cookie})
    assert replay.status_code == 401 and replay.json()["error"]["code"] == "dashboard_login_required"
    with _signed_in(keyed_gw) as other:  # other sessions go on
        assert other.get("/dashboard/api/summary").status_code == 200


@pytest.mark.parametrize("headers", [{"origin": "https://attacker.example"}, {"origin": "null"},
                                     {"sec-fetch-site": "cross-site"}, {"sec-fetch-site": "same-site"}])
def test_a_cross_origin_login_is_refused(keyed_gw, headers) -> None:
    r = httpx.post(keyed_gw.url + "/dashboard/login", data={"key": ADMIN}, headers=headers)
    assert r.status_code == 403 and COOKIE not in r.headers.get("set-cookie", "")


def test_a_same_origin_login_is_accepted(keyed_gw) -> None:
    origin = keyed_gw.url  # http://127.0.0.1:<port>, the Host httpx sends
    r = httpx.post(keyed_gw.url + "/dashboard/login", data={"key": ADMIN},
                   headers={"origin": origin, "sec-fetch-site": "same-origin"})
    assert r.status_code == 303 and COOKIE in r.headers["set-cookie"]


def test_failed_logins_are_throttled_and_logged_without_the_key(tmp_path, caplog) -> None:
    gw = start_gateway(tmp_path, admin_key=ADMIN, dashboard_login_attempts=3)
    try:
        with caplog.at_level(logging.WARNING, logger="mixroute.dashboard"):
            codes = [httpx.post(gw.url + "/dashboard/login", data={"key": f"guess-{i}"}).status_code
                     for i in range(3)]
            assert codes == [401, 401, 401]
            late = httpx.post(gw.url + "/dashboard/login", data={"key": ADMIN})  # right key, too late
            assert late.status_code == 429 and int(late.headers["retry-after"]) >= 1
            assert COOKIE not in late.headers.get("set-cookie", "")
        failures = [r.getMessage() for r in caplog.records if "failed login from" in r.getMessage()]
        assert len(failures) == 3 and all("127.0.0.1" in m for m in failures)
        assert not any("guess-" in r.getMessage() or ADMIN in r.getMessage() for r in caplog.records)
    finally:
        gw.stop()


def test_a_logout_on_one_replica_ends_the_session_on_another(tmp_path) -> None:
    url = os.environ.get("MIXROUTE_TEST_REDIS_URL")
    if not url:
        pytest.skip("MIXROUTE_TEST_REDIS_URL is not set (e.g. redis://127.0.0.1:6379/0)")
    shared = {"admin_key": ADMIN, "redis_url": url, "redis_prefix": redis_test_prefix(),
              "database_url": f"sqlite:///{tmp_path}/shared.db"}
    a = start_gateway(tmp_path / "a", **shared)
    b = start_gateway(tmp_path / "b", **shared)
    try:
        with _signed_in(a) as client:
            cookie = client.cookies[COOKIE]
            assert httpx.get(b.url + "/dashboard/api/summary", cookies={COOKIE: cookie}).status_code == 200
            assert client.post("/dashboard/logout").status_code == 303
        assert httpx.get(b.url + "/dashboard/api/summary", cookies={COOKIE: cookie}).status_code == 401
    finally:
        a.stop()
        b.stop()
