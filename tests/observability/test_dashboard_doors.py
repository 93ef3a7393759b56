"""Who may open the dashboard, and its sessions, on a real gateway: a login as soon as any
key exists, logout ending the cookie, the login's origin check and its throttle."""

from __future__ import annotations

import logging

import httpx
import sqlalchemy as sa

from gateway.auth.keys import create_key
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
