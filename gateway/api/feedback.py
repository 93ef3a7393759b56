"""``POST /v1/feedback``: a score and/or label for an earlier request.

Body: ``{"request_id", "score"?, "label"?, "comment"?, "source"?, "id"?}``. ``score`` is in
[0, 1] (1 = good); at least one of ``score`` and ``label`` is required. ``id`` makes a
retry idempotent: the same ``id`` for the same request stores one row.

The answer is ``202`` with ``{"id", "object": "feedback", "request_id"}`` once the row is
queued: it is written through the store's queue and journal like decisions, so it
survives a database outage.

A client may rate a request right after its response, before the decision row is
committed: the store finds decisions this process recorded in memory, and polls the
database briefly (``_WAIT_S``) for ones recorded by another replica.

Errors::

    InvalidRequest    400 invalid_request_error  invalid_value / missing_required_parameter
                                                 (also a NUL character in any string field)
    RequestNotFound   404 invalid_request_error  request_not_found  (also another tenant's request)
    StoreUnavailable  503 api_error              store_unavailable
"""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field, field_validator
from sqlalchemy.exc import SQLAlchemyError

from backends.errors import MixrouteError
from gateway.api.deps import PrincipalDep, SettingsDep
from gateway.auth.guard import OPEN, Principal
from gateway.request_body import read_json, refuse_cross_site
from gateway.responses import FastJSONResponse
from gateway.schemas import validate
from gateway.store.feedback import DecisionRef, FeedbackRecord, new_feedback_id
from router.errors import InvalidRequest

log = logging.getLogger("mixroute.gateway")
router = APIRouter()

_WAIT_S = 1.0
"""How long to wait for a decision row another replica may still be writing (seconds):
several times the default ``store_flush_interval_s`` of 0.2 s."""


class RequestNotFound(InvalidRequest):
    status = 404
    code = "request_not_found"


class StoreUnavailable(MixrouteError):
    status = 503
    type = "api_error"
    code = "store_unavailable"


class FeedbackRequest(BaseModel):
    """``POST /v1/feedback`` body."""

    model_config = ConfigDict(extra="forbid", strict=True)

    request_id: str = Field(min_length=1, max_length=200)
    score: float | None = Field(default=None, ge=0, le=1, allow_inf_nan=False)
    label: str | None = Field(default=None, min_length=1, max_length=200)
    comment: str | None = Field(default=None, max_length=10_000)
    source: str = Field(default="api", min_length=1, max_length=100)
    id: str | None = Field(default=None, min_length=1, max_length=200)

    @field_validator("request_id", "label", "comment", "source", "id")
    @classmethod
    def _no_nul(cls, value: str | None) -> str | None:
        # PostgreSQL text cannot hold U+0000: a NUL accepted here would be refused by the
        # store after the 202 (set aside as rejected), and a NUL request_id made the lookup
        # fail as if the store were down.
        if value is not None and "\x00" in value:
            raise ValueError("must not contain NUL characters (U+0000)")
        return value


def _owns(principal: Principal, ref: DecisionRef) -> bool:
    if principal.admin or (principal.tenant is None and principal.key is None):
        return True  # the admin key, or auth off
    return ref.tenant == principal.tenant


@router.post("/v1/feedback", status_code=202)
async def feedback(request: Request, settings: SettingsDep, principal: PrincipalDep):
    if principal is OPEN:  # auth off: a web page must not write feedback cross-site (what-if reads it)
        refuse_cross_site(request.headers.get("content-type"))
    body = FeedbackRequest(**validate(FeedbackRequest, await read_json(request, settings.max_body_bytes)))
    if body.score is None and body.label is None:
        raise InvalidRequest("Give a score in [0, 1], a label, or both", param="score",
                             code="missing_required_parameter")
    store = request.app.state.store
    try:
        ref = await store.find_decision(body.request_id, wait_s=_WAIT_S)
    except SQLAlchemyError as exc:
        log.warning("feedback: decision lookup failed (%s)", type(exc).__name__)
        raise StoreUnavailable("The store cannot be queried right now; retry the feedback later") from None
    if ref is None or not _owns(principal, ref):
        raise RequestNotFound(f"No request with id {body.request_id!r}", param="request_id")
    # A client id is scoped to the request, so two tenants' ids can never collide.
    fid = f"{ref.request_id}/{body.id}" if body.id else new_feedback_id()
    store.record_feedback(FeedbackRecord(request_id=ref.request_id, score=body.score, label=body.label,
                                         comment=body.comment, source=body.source, tenant=ref.tenant, id=fid))
    return FastJSONResponse({"id": fid, "object": "feedback", "request_id": ref.request_id}, status_code=202)
