"""``GET /v1/models``: the routes and the backends of the live policy."""

from __future__ import annotations

from fastapi import APIRouter

from gateway.api.deps import PrincipalDep, RuntimeDep
from gateway.responses import FastJSONResponse

router = APIRouter()


@router.get("/v1/models")
async def list_models(runtime: RuntimeDep, principal: PrincipalDep):
    """OpenAI ``list`` of ``model`` objects; ``mixroute`` says whether each id is a route
    (routed) or a backend (pinned), and marks demo backends."""
    policy = runtime.loaded.policy
    created = int(runtime.loaded.policy.version)
    data = [
        {"id": r.name, "object": "model", "created": created, "owned_by": "mixroute",
         "mixroute": {"type": "route", "default": r.name == policy.default_route, "backends": r.backends,
                      "description": r.description, "quality_bar": r.quality_bar.model_dump(exclude_none=True)}}
        for r in policy.routes
    ]
    data += [
        {"id": b.name, "object": "model", "created": created, "owned_by": "mixroute",
         "mixroute": {"type": "backend", "kind": b.kind, "model": b.model, "tags": b.tags, "demo": b.demo,
                      "description": (f"DEMO: simulated by the fake backend, not the real {b.model}"
                                      if b.demo else f"{b.kind} backend serving {b.model}")}}
        for b in policy.backends
    ]
    return FastJSONResponse({"object": "list", "data": data, "policy_hash": runtime.loaded.hash})
