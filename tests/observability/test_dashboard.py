"""The dashboard over real traffic: page, JSON API numbers against the store, login flow,
cookie, tenant isolation, and the empty cases."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
import sqlalchemy as sa

from backends.pricing import cost_usd
from gateway.auth.keys import create_key, revoke_key
from gateway.dashboard.session import COOKIE
from router.policy import DEMO_POLICY, load_policy
from tests.observability.conftest import chat, start_gateway, wait_row

ADMIN = "admin-secret-for-tests"


def _outcomes(url: str, tenant: str | None = None) -> list[dict]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            q = ("SELECT o.*, d.tenant, d.candidates FROM outcomes o JOIN decisions d USING (request_id)"
                 + (" WHERE d.tenant = :t" if tenant else ""))
            return [dict(r) for r in conn.execute(sa.text(q), {"t": tenant}).mappings()]
    finally:
        engine.dispose()


@pytest.fixture(scope="module")
def open_gw(tmp_path_factory):
    gw = start_gateway(tmp_path_factory.mktemp("dash-open"))
    last = None
    for i, (model, stream) in enumerate([("auto", False), ("auto", True), ("best", False), ("self-hosted", True),
                                         ("auto", False), ("gpt-4o", False)]):
        last = chat(gw, f"Question {i}: explain prefix caching briefly", model=model, stream=stream)
        assert last.status_code == 200
    wait_row(gw.settings.database_url, "outcomes", last.headers["x-mixroute-request-id"])
    yield gw
    gw.stop()


def test_page_is_open_on_loopback_without_admin_key(open_gw):
    page = httpx.get(open_gw.url + "/dashboard")
    assert page.status_code == 200 and "chart.umd.min.js" in page.text
    js = httpx.get(open_gw.url + "/dashboard/static/chart.umd.min.js")
    assert js.status_code == 200 and "Chart.js" in js.text[:200]


def test_summary_matches_the_store(open_gw):
    data = httpx.get(open_gw.url + "/dashboard/api/summary", params={"since": "1h"}).json()
    rows = _outcomes(open_gw.settings.database_url)
    assert not data["empty"] and data["viewer"] == {"admin": True, "tenant": None}
    assert data["totals"]["requests"] == len(rows) == 6
    assert data["totals"]["spend_usd"] == pytest.approx(sum(r["cost_usd"] for r in rows))
    assert sum(sum(v) for v in data["spend"]["backend"].values()) == pytest.approx(data["totals"]["spend_usd"])
    assert sum(data["mix"]["overall"].values()) == 6
    assert set(data["latency"]) <= set(data["backends"]) and data["latency"]
    assert any(v["itl_p50"] is not None for v in data["latency"].values())  # two streamed requests
    # Savings recomputed independently: reprice each outcome at its strongest candidate's prices.
    prices = {b.name: b.pricing for b in load_policy(DEMO_POLICY).policy.backends}
    strongest = 0.0
    for r in rows:
        cands = json.loads(r["candidates"]) if isinstance(r["candidates"], str) else r["candidates"]
        best = max(cands, key=lambda c: (c["predicted_quality"], c["expected_cost_usd"]))
        strongest += cost_usd(prices[best["backend"]], r["tokens_in"], r["tokens_out"], r["tokens_cached"])
    s = data["savings"]
    assert s["strongest_usd"] == pytest.approx(strongest)
    assert s["saved_vs_strongest_usd"] == pytest.approx(strongest - s["actual_usd"])
    assert s["saved_vs_strongest_usd"] > 0  # the demo routes most traffic below gpt-4o
    assert s["reference"] == "gpt-4o"  # highest output price in the demo policy
    ref = httpx.get(open_gw.url + "/dashboard/api/summary", params={"since": "1h", "reference": "gpt-4o-mini"}).json()
    assert ref["savings"]["reference"] == "gpt-4o-mini"
    assert [t["name"] for t in data["top_routes"]][0] in {"auto", "best", "gpt-4o", "self-hosted"}


def test_empty_range_and_bad_input(open_gw):
    empty = httpx.get(open_gw.url + "/dashboard/api/summary",
                      params={"since": "2020-01-01T00:00:00Z", "until": "2020-01-02T00:00:00Z"}).json()
    assert empty["empty"] is True and empty["totals"]["requests"] == 0
    assert empty["savings"]["saved_vs_strongest_pct"] is None
    bad = httpx.get(open_gw.url + "/dashboard/api/summary", params={"since": "yesterday-ish"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "since"
    backwards = httpx.get(open_gw.url + "/dashboard/api/summary", params={"since": "1h", "until": "2h"})
    assert backwards.status_code == 400
    unknown = httpx.get(open_gw.url + "/dashboard/api/summary", params={"reference": "gpt-9"})
    assert unknown.status_code == 400 and unknown.json()["error"]["param"] == "reference"
    for params, param in (({"since": "999999d"}, "since"), ({"since": "99999999999999w"}, "since"),
                          ({"until": "0001-01-01"}, "until"), ({"since": "9999-12-31T23:00:00-05:00"}, "since")):
        far = httpx.get(open_gw.url + "/dashboard/api/summary", params=params)
        assert far.status_code == 400, (params, far.text)
        assert far.json()["error"]["param"] == param and far.json()["error"]["code"] == "invalid_value"


@pytest.fixture(scope="module")
def keyed_gw(tmp_path_factory):
    gw = start_gateway(tmp_path_factory.mktemp("dash-keys"), admin_key=ADMIN)
    engine = sa.create_engine(gw.settings.database_url)
    keys = {t: create_key(engine, t) for t in ("acme", "globex", "initech")}
    engine.dispose()
    last = None
    for tenant, n in (("acme", 3), ("globex", 2)):
        for i in range(n):
            last = chat(gw, f"{tenant} {i}", key=keys[tenant][0])
            assert last.status_code == 200
    fb = httpx.post(gw.v1 + "/feedback", json={"request_id": last.headers["x-mixroute-request-id"], "score": 0.1},
                    headers={"authorization": f"Bearer {keys['globex'][0]}"})
    assert fb.status_code == 202, fb.text
    wait_row(gw.settings.database_url, "outcomes", last.headers["x-mixroute-request-id"])
    wait_row(gw.settings.database_url, "feedback", last.headers["x-mixroute-request-id"])
    yield gw, keys
    gw.stop()


@contextmanager
def _login(gw, key: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gw.url) as client:
        r = client.post("/dashboard/login", data={"key": key})
        assert r.status_code == 303 and r.headers["location"] == "/dashboard"
        yield client


def test_admin_key_requires_login_and_a_wrong_key_gets_a_message(keyed_gw):
    gw, _ = keyed_gw
    assert httpx.get(gw.url + "/dashboard").status_code == 303
    api = httpx.get(gw.url + "/dashboard/api/summary")
    assert api.status_code == 401 and api.json()["error"]["code"] == "dashboard_login_required"
    wrong = httpx.post(gw.url + "/dashboard/login", data={"key": "nope"})
    assert wrong.status_code == 401 and "Wrong key" in wrong.text

    def chunked():  # no content-length: the body is read only up to the form cap
        yield f"key={ADMIN}&pad=".encode()
        for _ in range(64):
            yield b"x" * 65536

    huge = httpx.post(gw.url + "/dashboard/login", content=chunked(),
                      headers={"content-type": "application/x-www-form-urlencoded"})
    assert huge.status_code == 401  # over the cap: not read, not a login, even with the right key
    with httpx.Client(base_url=gw.url) as client:
        r = client.post("/dashboard/login", data={"key": ADMIN})
        cookie = r.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
        assert "Path=/dashboard" in cookie and ADMIN not in cookie
        assert client.get("/dashboard").status_code == 200
        data = client.get("/dashboard/api/summary").json()
        assert data["viewer"] == {"admin": True, "tenant": None}
        assert {t["name"] for t in data["top_tenants"]} == {"acme", "globex"}
        assert data["totals"]["requests"] == 5
        q = data["quality"]
        assert q["feedback"] == 1 and q["routes"]["auto"]["misses"] == 1 and q["routes"]["auto"]["complies"] is False
        client.post("/dashboard/logout")
        client.cookies.clear()
        assert client.get("/dashboard/api/summary").status_code == 401


def test_tenant_key_sees_only_its_tenant(keyed_gw):
    gw, keys = keyed_gw
    with _login(gw, keys["acme"][0]) as client:
        data = client.get("/dashboard/api/summary").json()
        assert data["viewer"] == {"admin": False, "tenant": "acme"}
        assert data["totals"]["requests"] == 3
        assert [t["name"] for t in data["top_tenants"]] == ["acme"]
        assert list(data["spend"]["tenant"]) == ["acme"]
        assert data["totals"]["spend_usd"] == pytest.approx(
            sum(r["cost_usd"] for r in _outcomes(gw.settings.database_url, "acme")))
        assert data["quality"]["feedback"] == 0  # globex's feedback is not visible
    with _login(gw, keys["initech"][0]) as client:
        data = client.get("/dashboard/api/summary").json()
        assert data["empty"] is True and data["viewer"]["tenant"] == "initech"


def test_revoked_key_ends_the_session(keyed_gw):
    gw, _ = keyed_gw
    engine = sa.create_engine(gw.settings.database_url)
    key, info = create_key(engine, "hooli")
    with _login(gw, key) as client:
        assert client.get("/dashboard/api/summary").status_code == 200
        revoke_key(engine, info.key_id)
        assert client.get("/dashboard/api/summary").status_code == 401
    engine.dispose()


def test_forged_cookie_is_refused(keyed_gw):
    gw, keys = keyed_gw
    with _login(gw, keys["acme"][0]) as client:
        value = client.cookies[COOKIE]
        body, sig = value.rsplit(".", 1)
        payload = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        payload.update(admin=True, tenant=None)
        forged = base64.urlsafe_b64encode(json.dumps(payload).encode()).decode().rstrip("=") + "." + sig
        r = httpx.get(gw.url + "/dashboard/api/summary", cookies={COOKIE: forged})
        assert r.status_code == 401


def test_summary_and_feedback_say_503_while_the_database_is_down(tmp_path):
    """A store whose database refuses connections: requests are still served (rows go to the
    journal), and the dashboard API answers 503 store_unavailable (as feedback does), not 500.
    Without an admin key the gateway cannot know whether keys exist in that store, so it
    fails closed (503 auth_unavailable) instead of serving anyone; with one it serves."""
    url = "postgresql+psycopg://postgres@127.0.0.1:1/mixroute_down"
    gw = start_gateway(tmp_path, database_url=url, store_journal_path=tmp_path / "journal.jsonl", ready_status=503)
    try:
        closed = chat(gw, "nobody knows whether keys exist")
        assert closed.status_code == 503 and closed.json()["error"]["code"] == "auth_unavailable"
        # ... and /readyz says so, so that a load balancer sends the replica no traffic (a
        # fresh-user pass found it 200 "ready" while every request was refused).
        ready = httpx.get(gw.url + "/readyz", timeout=10)
        assert ready.status_code == 503 and ready.json()["status"] == "auth_unavailable"
    finally:
        gw.stop()
    gw = start_gateway(tmp_path, database_url=url, store_journal_path=tmp_path / "journal.jsonl",
                       admin_key="adm-test-key-0123456789")
    try:
        assert chat(gw, "still served while the store is down", key="adm-test-key-0123456789").status_code == 200
        login = httpx.post(gw.url + "/dashboard/login", data={"key": "adm-test-key-0123456789"})
        down = httpx.get(gw.url + "/dashboard/api/summary", cookies=login.cookies, timeout=30)
        assert down.status_code == 503, down.text
        assert down.json()["error"]["code"] == "store_unavailable"
    finally:
        gw.stop()
