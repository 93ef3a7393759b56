"""Who may read ``GET /metrics`` (every tenant's spend): ``MIXROUTE_METRICS_AUTH``."""

from __future__ import annotations

import httpx
import pytest
import sqlalchemy as sa

from gateway.auth.keys import create_key
from tests.observability.conftest import chat, start_gateway

ADMIN = "adm-metrics-0123456789"


def _scrape(gw, key: str | None = None) -> httpx.Response:
    return httpx.get(gw.url + "/metrics", headers={"authorization": f"Bearer {key}"} if key else {})


@pytest.fixture(scope="module")
def keyed(tmp_path_factory):
    gw = start_gateway(tmp_path_factory.mktemp("metrics-auth"), admin_key=ADMIN)
    engine = sa.create_engine(gw.settings.database_url)
    key, _ = create_key(engine, "acme")
    engine.dispose()
    assert chat(gw, "spend something", key=key).status_code == 200
    yield gw, key
    gw.stop()


def test_with_auth_on_only_the_admin_key_reads_metrics(keyed) -> None:
    gw, tenant_key = keyed
    for key in (None, tenant_key, "not-a-key"):
        resp = _scrape(gw, key)
        assert resp.status_code == 401 and resp.json()["error"]["type"] == "authentication_error"
        assert "acme" not in resp.text
    ok = _scrape(gw, ADMIN)
    assert ok.status_code == 200 and 'tenant="acme"' in ok.text


def test_metrics_auth_none_serves_anyone_and_admin_needs_the_key_even_with_auth_off(tmp_path) -> None:
    gw = start_gateway(tmp_path / "none", admin_key=ADMIN, metrics_auth="none")
    try:
        assert _scrape(gw).status_code == 200
    finally:
        gw.stop()
    gw = start_gateway(tmp_path / "open")  # auth off: auto serves loopback clients
    try:
        assert _scrape(gw).status_code == 200
    finally:
        gw.stop()
    gw = start_gateway(tmp_path / "strict", metrics_auth="admin")
    try:
        assert _scrape(gw).status_code == 401
    finally:
        gw.stop()
