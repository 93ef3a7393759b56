"""API keys while the store is down: keyed gateways stay closed, known keys keep working.

A real SQLite store is made unusable by moving its file away (new connections then find an
empty database without the keys table), as a database outage looks to the gateway."""

from __future__ import annotations

import pytest

from gateway.auth.guard import OPEN, AuthError, Authenticator, AuthUnavailable
from gateway.auth.keys import create_key
from gateway.store.db import make_engine, upgrade


def _store(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path}/keys.db")
    upgrade(engine)
    return engine


def _break(engine, tmp_path) -> None:
    engine.dispose()
    (tmp_path / "keys.db").rename(tmp_path / "keys.db.away")


async def test_a_keyed_gateway_stays_closed_and_known_keys_work_through_an_outage(tmp_path):
    engine = _store(tmp_path)
    key, info = create_key(engine, "acme")
    auth = Authenticator(engine, admin_key=None, ttl_s=0.0)  # every call asks the store
    principal = await auth.authenticate({"authorization": f"Bearer {key}"})
    assert principal.tenant == "acme"
    _break(engine, tmp_path)
    # No key: still refused (it used to be let in as "no keys exist" while the store was down).
    with pytest.raises(AuthError):
        await auth.authenticate({})
    # The key seen before keeps its last known state; an unseen key cannot be checked.
    assert (await auth.authenticate({"authorization": f"Bearer {key}"})).tenant == "acme"
    with pytest.raises(AuthUnavailable):
        await auth.authenticate({"authorization": "Bearer mr-never-seen-key-0123456789"})


async def test_a_store_that_never_answered_fails_closed(tmp_path):
    engine = _store(tmp_path)
    create_key(engine, "acme")
    _break(engine, tmp_path)
    with pytest.raises(AuthUnavailable):
        await Authenticator(engine, admin_key=None).authenticate({})


async def test_a_store_without_keys_is_open(tmp_path):
    assert await Authenticator(_store(tmp_path), admin_key=None).authenticate({}) is OPEN
