"""``GET /v1/models`` (the routes and the backends of the live policy) and
``GET /v1/models/{model_id}`` (one of them, as the OpenAI SDK's ``models.retrieve``)."""

from __future__ import annotations

from fastapi import APIRouter

from gateway.api.deps import PrincipalDep, RuntimeDep
from gateway.responses import FastJSONResponse
from gateway.runtime import Runtime
from router.aggregate import DEFAULT_WINDOW
from router.errors import UnknownModel
from router.policy.tasks import route_task

router = APIRouter()


def _visible(models: list[dict], principal) -> list[dict]:
    """The models ``principal``'s key may use (a key limited with ``--routes`` sees only those)."""
    key = getattr(principal, "key", None)
    if key is None or not key.routes:
        return models
    return [m for m in models if m["id"] in key.routes]


def _bar(qb) -> dict:
    """A route's quality bar as set, plus the ``window``, ``uncertainty_z`` and ``allocation``
    in force under ``route_target`` (their defaults are not written in the policy)."""
    out = qb.model_dump(exclude_none=True)
    if qb.route_target is not None:
        out["window"] = qb.window or DEFAULT_WINDOW
        out["uncertainty_z"] = qb.z
        out["allocation"] = qb.allocation_in_force
    return out


def _models(runtime: Runtime) -> list[dict]:
    """OpenAI ``model`` objects: the routes, then the backends; ``mixroute`` says whether each
    id is a route (routed) or a backend (pinned), what it serves (``task``: ``chat`` or
    ``embedding``, for ``/v1/embeddings``), and marks demo backends."""
    policy = runtime.loaded.policy
    created = int(policy.version)
    data = [
        {"id": r.name, "object": "model", "created": created, "owned_by": "mixroute",
         "mixroute": {"type": "route", "default": r.name == policy.default_route, "backends": r.backends,
                      "task": route_task(policy, r), "description": r.description,
                      "quality_bar": _bar(r.quality_bar)}}
        for r in policy.routes
    ]
    data += [
        {"id": b.name, "object": "model", "created": created, "owned_by": "mixroute",
         "mixroute": {"type": "backend", "kind": b.kind, "model": b.model, "task": b.task, "tags": b.tags,
                      "demo": b.demo,
                      "description": (f"DEMO: simulated by the fake backend, not the real {b.model}"
                                      if b.demo else f"{b.kind} backend serving {b.model}")}}
        for b in policy.backends
    ]
    return data


@router.get("/v1/models")
@router.head("/v1/models", include_in_schema=False)  # uptime checkers probe with HEAD
async def list_models(runtime: RuntimeDep, principal: PrincipalDep):
    """OpenAI ``list`` of ``model`` objects (see :func:`_models`) the key may use, and the
    policy hash."""
    return FastJSONResponse({"object": "list", "data": _visible(_models(runtime), principal),
                             "policy_hash": runtime.loaded.hash})


@router.get("/v1/models/{model_id:path}")
@router.head("/v1/models/{model_id:path}", include_in_schema=False)
async def retrieve_model(model_id: str, runtime: RuntimeDep, principal: PrincipalDep):
    """The ``model`` object of one route or backend, as listed by ``GET /v1/models``.

    Raises:
        router.errors.UnknownModel: no route or backend has that name (404 ``model_not_found``).
    """
    models = _visible(_models(runtime), principal)
    for model in models:
        if model["id"] == model_id:
            return FastJSONResponse(model)
    known = ", ".join(m["id"] for m in models)
    raise UnknownModel(f"The model '{model_id[:100]}{'...' if len(model_id) > 100 else ''}' does not exist (routes and backends: {known})", param="model")
