"""Shared FastAPI dependencies (``Annotated`` aliases).

All are ``async def``: FastAPI runs a plain ``def`` dependency in its thread pool, which
costs a thread hand-off per request on the hot path.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from backends.errors import MixrouteError
from gateway.auth.guard import Principal
from gateway.runtime import Runtime
from gateway.settings import Settings


class NotReady(MixrouteError):
    status = 503
    code = "not_ready"


async def _runtime(request: Request) -> Runtime:
    runtime = request.app.state.policies.current
    if runtime is None:
        raise NotReady("The gateway is starting: the policy and router are not loaded yet")
    return runtime


async def _principal(request: Request) -> Principal:
    return await request.app.state.auth.authenticate(request.headers)


async def _admin(request: Request) -> Principal:
    principal = await request.app.state.auth.authenticate(request.headers)
    request.app.state.auth.require_admin(principal)
    return principal


async def _settings(request: Request) -> Settings:
    return request.app.state.settings


async def hot_path_deps(request: Request) -> tuple[Runtime, Settings, Principal]:
    """``(runtime, settings, principal)`` for the completion endpoints, resolved by plain
    calls in the same order and with the same errors as the ``Depends`` aliases below
    (runtime first: ``NotReady`` before any authentication error)."""
    runtime = await _runtime(request)
    return runtime, await _settings(request), await _principal(request)


RuntimeDep = Annotated[Runtime, Depends(_runtime)]
PrincipalDep = Annotated[Principal, Depends(_principal)]
AdminDep = Annotated[Principal, Depends(_admin)]
SettingsDep = Annotated[Settings, Depends(_settings)]
