"""Schemathesis against ``/openapi.json`` of a real gateway (demo policy, fake backends):
every declared operation, bodies generated from the declared request schemas (fitting them
and not), with auth off, with the admin key and with a tenant's key. Goal: no server error
(5xx), no traceback.

Kept small for CI (``MAX_EXAMPLES`` per operation and caller); raise it locally for a deeper run.
"""

from __future__ import annotations

import os

import pytest
import schemathesis
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error

from gateway.auth.keys import create_key
from tests.gateway.conftest import start_gateway

MAX_EXAMPLES = int(os.environ.get("MIXROUTE_SCHEMATHESIS_EXAMPLES", "8"))
ADMIN = "adm-schemathesis-0123456789"
SETTINGS = settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))
CALLERS: dict[str, dict[str, str]] = {}


@pytest.fixture(scope="module")
def open_gw(tmp_path_factory):
    gw = start_gateway(tmp_path_factory.mktemp("st-open"))
    yield gw
    gw.stop()


@pytest.fixture(scope="module")
def keyed_gw(tmp_path_factory):
    gw = start_gateway(tmp_path_factory.mktemp("st-keyed"), admin_key=ADMIN)
    engine = sa.create_engine(gw.settings.database_url)
    CALLERS["tenant"] = {"authorization": f"Bearer {create_key(engine, 'acme')[0]}"}
    engine.dispose()
    CALLERS["admin"] = {"authorization": f"Bearer {ADMIN}"}
    yield gw
    gw.stop()


def _fuzz(gw, headers: dict[str, str] | None) -> int:
    """Every operation of the gateway's schema: ``MAX_EXAMPLES`` cases that fit the schema,
    and as many that do not (where the operation has anything to get wrong).

    Returns:
        the number of operations exercised.
    """
    schema = schemathesis.openapi.from_url(gw.url + "/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            @given(case=operation.as_strategy(generation_mode=mode))
            @SETTINGS
            def run(case) -> None:
                response = case.call_and_validate(headers=headers, checks=[not_a_server_error])
                assert "Traceback" not in response.text, response.text[:2000]

            try:
                run()
            except Unsatisfiable:  # nothing to get wrong (GET /healthz takes no input)
                assert mode is GenerationMode.NEGATIVE, operation.label
    return len(operations)


def test_auth_off(open_gw) -> None:
    assert _fuzz(open_gw, None) >= 10


def test_tenant_key(keyed_gw) -> None:
    assert _fuzz(keyed_gw, CALLERS["tenant"]) >= 10


def test_admin_key(keyed_gw) -> None:
    # Last: the admin API's generated calls may revoke keys or tenants.
    assert _fuzz(keyed_gw, CALLERS["admin"]) >= 10
