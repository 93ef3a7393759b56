"""``HEAD /healthz``, ``/readyz`` and ``/v1/models``; ``GET /v1/models/{model_id}`` over real HTTP and
through the OpenAI SDK."""

from __future__ import annotations

import warnings

import httpx
import openai
import pytest

from tests.gateway.conftest import FALLBACK_POLICY


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/v1/models", "/v1/models/auto"])
def test_head_answers_like_get_without_body(demo_gateway, path):
    get = httpx.get(demo_gateway.url + path)
    head = httpx.head(demo_gateway.url + path)
    assert head.status_code == get.status_code == 200
    assert head.content == b""
    assert head.headers["content-type"] == get.headers["content-type"]


def test_openapi_has_one_operation_per_health_path(tmp_path):
    from gateway.app import create_app
    from gateway.settings import Settings

    app = create_app(Settings(database_url=f"sqlite:///{tmp_path}/m.db", classifier="off", policy_watch=False))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # FastAPI warns on duplicate operation ids
        spec = app.openapi()
    assert all(list(spec["paths"][p]) == ["get"] for p in ("/healthz", "/readyz", "/v1/models"))


def test_retrieve_model_matches_the_list(demo_gateway):
    listed = httpx.get(demo_gateway.v1 + "/models").json()["data"]
    for model in listed:
        got = httpx.get(f"{demo_gateway.v1}/models/{model['id']}")
        assert got.status_code == 200 and got.json() == model


def test_retrieve_unknown_model_is_404_envelope(demo_gateway):
    r = httpx.get(demo_gateway.v1 + "/models/no-such-model")
    assert r.status_code == 404
    error = r.json()["error"]
    assert error["code"] == "model_not_found" and error["type"] == "invalid_request_error"
    assert error["param"] == "model"  # as for an unknown model in a completion request
    assert "no-such-model" in error["message"]


def test_openai_sdk_models_retrieve(demo_gateway):
    client = openai.OpenAI(base_url=demo_gateway.v1, api_key="unused", max_retries=0)
    model = client.models.retrieve("auto")
    assert model.id == "auto" and model.object == "model" and model.owned_by == "mixroute"
    assert model.model_extra["mixroute"]["type"] == "route"
    with pytest.raises(openai.NotFoundError) as info:
        client.models.retrieve("nope")
    assert info.value.code == "model_not_found"


def test_retrieve_backend_of_a_custom_policy(fallback_gateway):
    assert "good" in FALLBACK_POLICY
    got = httpx.get(fallback_gateway.v1 + "/models/good").json()
    assert got["mixroute"] == {**got["mixroute"], "type": "backend", "kind": "fake", "model": "good-model"}
