"""``POST /v1/feedback``: a score and/or label for an earlier request.

Body: ``{"request_id", "score"?, "label"?, "comment"?, "source"?, "id"?}``. ``score`` is in
[0, 1] (1 = good); at least one of ``score`` and ``label`` is required. ``id`` makes a
retry idempotent: the same ``id`` for the same request stores one row.

The answer is ``202`` with ``{"id", "object": "feedback", "request_id"}`` for every
well-formed feedback, at once: whether the request is the caller's, another tenant's or
unknown is decided afterwards, off the request path (:mod:`gateway.store.feedback_queue`),
so neither the answer nor its timing tells one tenant which request ids another has. A
feedback about the caller's own request is written through the store's queue and journal
like decisions (it survives a database outage); one about another tenant's request, or a
request still unknown a second later (other replicas' decisions included), is dropped and
logged.

Errors::

    InvalidRequest    400 invalid_request_error  invalid_value / missing_required_parameter
                                                 (also a NUL character in any string field,
                                                 and ``source: judge``, which only the
                                                 gateway's judge writes)
    FeedbackBacklogFull 503 api_error            feedback_backlog_full  (MIXROUTE_FEEDBACK_MAX_PENDING
                                                 feedback rows wait for their requests)
"""

from __future__ import annotations


from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field, field_validator

from backends.errors import MixrouteError
from gateway.api.deps import PrincipalDep, SettingsDep
from gateway.auth.guard import OPEN
from gateway.openapi import request_body
from gateway.request_body import read_json, refuse_cross_site
from gateway.responses import FastJSONResponse
from gateway.schemas import validate
from gateway.store.feedback import FeedbackRecord, new_feedback_id
from router.errors import InvalidRequest

router = APIRouter()


class StoreUnavailable(MixrouteError):  # the dashboard's answer while the store cannot be read
    status = 503
    type = "api_error"
    code = "store_unavailable"


class FeedbackBacklogFull(MixrouteError):
    status = 503
    type = "api_error"
    code = "feedback_backlog_full"
    headers = {"retry-after": "1"}


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


@router.post("/v1/feedback", status_code=202, openapi_extra=request_body(FeedbackRequest))
async def feedback(request: Request, settings: SettingsDep, principal: PrincipalDep):
    if principal is OPEN:  # auth off: a web page must not write feedback cross-site (what-if reads it)
        refuse_cross_site(request.headers.get("content-type"))
    body = FeedbackRequest(**validate(FeedbackRequest, await read_json(request, settings.max_body_bytes)))
    if body.source.strip().lower() == "judge":  # the gateway's own judge writes these (gateway/judge.py)
        raise InvalidRequest("source 'judge' is reserved for the gateway's own judge (learning.judge); "
                             "use another source name", param="source", code="invalid_value")
    if body.score is None and body.label is None:
        raise InvalidRequest("Give a score in [0, 1], a label, or both", param="score",
                             code="missing_required_parameter")
    # A client id is scoped to the request, so two tenants' ids can never collide.
    fid = f"{body.request_id}/{body.id}" if body.id else new_feedback_id()
    record = FeedbackRecord(request_id=body.request_id, score=body.score, label=body.label, comment=body.comment,
                            source=body.source, id=fid)
    any_tenant = principal.admin or principal is OPEN
    if not request.app.state.feedback.submit(record, principal.tenant, any_tenant):
        raise FeedbackBacklogFull("Too much feedback is waiting for its requests to be found; retry shortly")
    return FastJSONResponse({"id": fid, "object": "feedback", "request_id": body.request_id}, status_code=202)
