"""``/openapi.json`` declares the request bodies of the POST endpoints, and a 405 names
every method the path serves."""

from __future__ import annotations

import httpx
import pytest

POSTS = {"/v1/chat/completions": "ChatCompletionRequest", "/v1/completions": "CompletionRequest",
         "/v1/embeddings": "EmbeddingsRequest", "/v1/responses": "ResponsesRequest",
         "/v1/feedback": "FeedbackRequest"}


def test_post_endpoints_declare_their_bodies(demo_gateway) -> None:
    spec = httpx.get(demo_gateway.url + "/openapi.json").json()
    schemas = spec["components"]["schemas"]
    for path, model in POSTS.items():
        body = spec["paths"][path]["post"]["requestBody"]
        assert body["required"] is True
        assert body["content"]["application/json"]["schema"] == {"$ref": f"#/components/schemas/{model}"}
        assert schemas[model]["type"] == "object"
    route = spec["paths"]["/v1/route"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert {r["$ref"].rsplit("/", 1)[1] for r in route["oneOf"]} == {"ChatCompletionRequest", "CompletionRequest"}
    assert "messages" in schemas["ChatCompletionRequest"]["required"]
    assert schemas["FeedbackRequest"]["required"] == ["request_id"]
    # Every reference resolves inside the document.
    refs = set()

    def walk(node) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("$ref"), str):
                refs.add(node["$ref"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(spec)
    assert refs and all(r.rsplit("/", 1)[1] in schemas for r in refs)


@pytest.mark.parametrize(("method", "path", "allow"), [
    ("POST", "/healthz", "GET, HEAD"), ("POST", "/readyz", "GET, HEAD"), ("POST", "/v1/models", "GET, HEAD"),
    ("PUT", "/v1/models/x", "GET, HEAD"), ("GET", "/v1/chat/completions", "POST"),
    ("PUT", "/v1/responses/resp_1", "GET, DELETE"),
])
def test_a_405_names_every_method_of_the_path(demo_gateway, method, path, allow) -> None:
    resp = httpx.request(method, demo_gateway.url + path)
    assert resp.status_code == 405 and resp.headers["allow"] == allow
    assert resp.json()["error"]["code"] == "method_not_allowed"
