"""The admin API: keys and tenants over HTTP, with spend so far and budget left for the
current period (:mod:`gateway.auth.admin_ops`, the code ``mixroute keys`` and ``mixroute
tenants`` run too). Every route needs ``MIXROUTE_ADMIN_KEY`` as the Bearer key.

Routes::

    GET    /v1/admin/keys[?tenant=&include_revoked=true]   list keys
    POST   /v1/admin/keys                                   create (the key is in the answer, once)
    GET    /v1/admin/keys/{key_id}                          one key
    PATCH  /v1/admin/keys/{key_id}                          change budget, period, rpm, tpm, routes
    DELETE /v1/admin/keys/{key_id}                          revoke
    GET    /v1/admin/tenants                                list tenants
    POST   /v1/admin/tenants                                create or replace a tenant's limits
    GET    /v1/admin/tenants/{name}                         one tenant
    PATCH  /v1/admin/tenants/{name}                         change budget, period, rpm, tpm, routes
    DELETE /v1/admin/tenants/{name}                         revoke all its keys, remove its limits

Errors (OpenAI envelope)::

    AdminDisabled    403 permission_error      admin_api_disabled  (no MIXROUTE_ADMIN_KEY)
    AuthError        401 authentication_error  invalid_api_key     (not the admin key)
    InvalidRequest   400 invalid_request_error invalid_value       (bad field; param names it)
    NotFoundError    404 invalid_request_error not_found
    StoreUnavailable 503 api_error             store_unavailable
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.exc import SQLAlchemyError

from backends.errors import MixrouteError
from gateway.api.feedback import StoreUnavailable
from gateway.auth import admin_ops
from gateway.auth.guard import Principal
from gateway.auth.keys import MAX_BUDGET_USD, MAX_PER_MINUTE, KeyError_
from gateway.responses import FastJSONResponse
from router.errors import InvalidRequest

router = APIRouter(prefix="/v1/admin", tags=["admin"])


class AdminDisabled(MixrouteError):
    status = 403
    type = "permission_error"
    code = "admin_api_disabled"


class NotFoundError(MixrouteError):
    status = 404
    type = "invalid_request_error"
    code = "not_found"


async def _admin_only(request: Request) -> Principal:
    """The admin key, and only it: without ``MIXROUTE_ADMIN_KEY`` the admin API is off (an
    open gateway must not let anyone mint keys)."""
    auth = request.app.state.auth
    if not auth.admin_key:
        raise AdminDisabled("The admin API needs MIXROUTE_ADMIN_KEY set on the gateway")
    principal = await auth.authenticate(request.headers)
    auth.require_admin(principal)
    return principal


Admin = Annotated[Principal, Depends(_admin_only)]
Budget = Annotated[float | None, Field(ge=0, le=MAX_BUDGET_USD, allow_inf_nan=False)]
PerMinute = Annotated[int | None, Field(ge=1, le=MAX_PER_MINUTE)]
PeriodName = Literal["day", "month", "total"]


class _NewLimits(BaseModel):
    """The limits a new key or tenant starts with (keys and tenants take the same ones)."""

    model_config = ConfigDict(extra="forbid")

    budget_usd: Budget = None
    period: PeriodName = "month"
    rpm: PerMinute = None
    tpm: PerMinute = None
    routes: list[str] = Field(default_factory=list)


class KeyCreate(_NewLimits):
    tenant: str


class TenantCreate(_NewLimits):
    name: str


class LimitsUpdate(BaseModel):
    """A change to a key's or a tenant's limits: only the fields sent change."""

    model_config = ConfigDict(extra="forbid")

    budget_usd: Budget = None
    period: PeriodName | None = None
    rpm: PerMinute = None
    tpm: PerMinute = None
    routes: list[str] | None = None


KeyUpdate = TenantUpdate = LimitsUpdate


async def _run(request: Request, fn, *args, **kwargs):
    """``fn(engine, *args)`` in a worker thread, its errors as the admin API's."""
    engine = request.app.state.store.engine
    try:
        return await asyncio.to_thread(fn, engine, *args, **kwargs)
    except KeyError_ as exc:
        raise InvalidRequest(str(exc), param=exc.param, code="invalid_value") from None
    except admin_ops.NotFound as exc:
        raise NotFoundError(str(exc)) from None
    except SQLAlchemyError:
        raise StoreUnavailable("The key store cannot be reached right now; retry later") from None


def _known_routes(request: Request) -> list[str] | None:
    runtime = request.app.state.policies.current
    if runtime is None:
        return None
    policy = runtime.loaded.policy
    return [r.name for r in policy.routes] + [b.name for b in policy.backends]


def _listing(data: list[dict]) -> FastJSONResponse:
    return FastJSONResponse({"object": "list", "data": data}, headers={"cache-control": "no-store"})


@router.get("/keys")
async def list_keys(request: Request, _: Admin, tenant: str | None = None,
                    include_revoked: bool = False) -> FastJSONResponse:
    return _listing(await _run(request, admin_ops.list_key_views, tenant, include_revoked))


@router.post("/keys", status_code=201)
async def create_key(request: Request, _: Admin, body: KeyCreate) -> FastJSONResponse:
    key, view = await _run(request, admin_ops.create_key, body.tenant, budget_usd=body.budget_usd,
                           period=body.period, rpm=body.rpm, tpm=body.tpm, routes=body.routes,
                           known_routes=_known_routes(request))
    return FastJSONResponse({**view, "key": key}, status_code=201, headers={"cache-control": "no-store"})


@router.get("/keys/{key_id}")
async def get_key(request: Request, _: Admin, key_id: str) -> FastJSONResponse:
    return FastJSONResponse(await _run(request, admin_ops.get_key_view, key_id))


@router.patch("/keys/{key_id}")
async def update_key(request: Request, _: Admin, key_id: str, body: KeyUpdate) -> FastJSONResponse:
    changes = body.model_dump(include=body.model_fields_set)
    return FastJSONResponse(await _run(request, admin_ops.update_key, key_id, changes, _known_routes(request)))


@router.delete("/keys/{key_id}")
async def revoke_key(request: Request, _: Admin, key_id: str) -> FastJSONResponse:
    return FastJSONResponse(await _run(request, admin_ops.revoke_key, key_id))


@router.get("/tenants")
async def list_tenants(request: Request, _: Admin) -> FastJSONResponse:
    return _listing(await _run(request, admin_ops.list_tenant_views))


@router.post("/tenants", status_code=201)
async def create_tenant(request: Request, _: Admin, body: TenantCreate) -> FastJSONResponse:
    limits = admin_ops.TenantLimits(body.budget_usd, body.period, body.rpm, body.tpm, tuple(body.routes))
    view = await _run(request, admin_ops.put_tenant, body.name, limits, _known_routes(request))
    return FastJSONResponse(view, status_code=201)


@router.get("/tenants/{name}")
async def get_tenant(request: Request, _: Admin, name: str) -> FastJSONResponse:
    return FastJSONResponse(await _run(request, admin_ops.get_tenant_view, name))


@router.patch("/tenants/{name}")
async def update_tenant(request: Request, _: Admin, name: str, body: TenantUpdate) -> FastJSONResponse:
    changes = body.model_dump(include=body.model_fields_set)
    return FastJSONResponse(await _run(request, admin_ops.update_tenant, name, changes, _known_routes(request)))


@router.delete("/tenants/{name}")
async def delete_tenant(request: Request, _: Admin, name: str) -> FastJSONResponse:
    return FastJSONResponse(await _run(request, admin_ops.delete_tenant, name))
