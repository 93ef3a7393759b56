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


class StoreUnavailable(MixrouteError):
    status = 503
    code = "store_unavailable"


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


async def hot_path_deps(request: Request, records: bool = True) -> tuple[Runtime, Settings, Principal]:
    """``(runtime, settings, principal)`` for the completion endpoints, resolved by plain
    calls in the same order and with the same errors as the ``Depends`` aliases below
    (runtime first: ``NotReady`` before any authentication error).

    Args:
        records: the request writes records (every door but a dry run): refused with
            :class:`StoreUnavailable` while the store can keep none
            (:meth:`gateway.store.writer.Store.keeps_records`), unless ``store_on_loss`` is
            ``serve``.
    """
    runtime = await _runtime(request)
    settings = await _settings(request)
    principal = await _principal(request)
    if records and not request.app.state.store.keeps_records() and settings.store_on_loss == "refuse":
        raise StoreUnavailable("The gateway cannot record requests right now (its database is down and its "
                               "journal is full); try again shortly")
    return runtime, settings, principal


RuntimeDep = Annotated[Runtime, Depends(_runtime)]
PrincipalDep = Annotated[Principal, Depends(_principal)]
AdminDep = Annotated[Principal, Depends(_admin)]
SettingsDep = Annotated[Settings, Depends(_settings)]
