"""Errors of the routing layer, each mapped to one HTTP status and OpenAI error type.

Their base, :class:`~backends.errors.MixrouteError`, lives on the floor
(:mod:`backends.errors`) beside the backends' own errors, so that nothing there imports this
layer; it is re-exported here.

Tree::

    MixrouteError (backends.errors)     500 api_error          internal_error
    ├── InvalidRequest                  400 invalid_request_error  invalid_request
    │   ├── ContextTooLarge             413 invalid_request_error  request_too_large
    │   ├── UnsupportedMediaType        415 invalid_request_error  unsupported_media_type
    │   ├── ContextTooLong              400 invalid_request_error  context_length_exceeded
    │   ├── UnknownModel                404 invalid_request_error  model_not_found
    │   └── WrongTask                   400 invalid_request_error  model_task_mismatch
    ├── NoCandidate                     422 invalid_request_error  no_candidate
    │   └── NoAllowedCandidate          403 permission_error   no_candidate
    ├── RequestRejected                 429 rate_limit_error   route_saturated
    └── BackendError (backends.errors)  502 api_error          upstream_error
        └── ...                         see :mod:`backends.errors`

The gateway renders every one of them as the OpenAI envelope
``{"error": {"message", "type", "param", "code"}}`` and never shows a stack trace.
"""

from __future__ import annotations

from backends.errors import MixrouteError

__all__ = [
    "BackendNotAllowed", "ContextTooLarge", "ContextTooLong", "InvalidRequest", "MixrouteError", "NoAllowedCandidate",
    "NoCandidate", "RequestRejected", "UnknownModel", "UnsupportedMediaType",
]


class InvalidRequest(MixrouteError):
    status = 400
    type = "invalid_request_error"
    code = "invalid_request"


class ContextTooLarge(InvalidRequest):
    status = 413
    code = "request_too_large"


class UnsupportedMediaType(InvalidRequest):
    status = 415
    code = "unsupported_media_type"


class ContextTooLong(InvalidRequest):
    code = "context_length_exceeded"


class UnknownModel(InvalidRequest):
    status = 404
    code = "model_not_found"


class WrongTask(InvalidRequest):
    """``model`` names a route or backend of the other task: an embedding model on a chat
    endpoint, or a chat model on ``/v1/embeddings`` (:mod:`router.policy.tasks`)."""

    code = "model_task_mismatch"


class BackendNotAllowed(MixrouteError):
    """A pinned request names a backend that the policy's rules do not allow for it."""

    status = 403
    type = "permission_error"
    code = "backend_not_allowed"


class NoCandidate(MixrouteError):
    """No backend of the route is predicted to clear its quality bar and the route says
    ``on_no_candidate: reject``. A 4xx, not a 5xx: the same request would be refused again,
    so clients must not retry it (OpenAI's SDKs retry 5xx answers)."""

    status = 422
    type = "invalid_request_error"
    code = "no_candidate"


class NoAllowedCandidate(NoCandidate):
    """The policy's rules (allowed backends, tags, cost limits) leave the route no backend
    for this request: refused as a pinned request to a forbidden backend is (403)."""

    status = 403
    type = "permission_error"


class RequestRejected(MixrouteError):
    status = 429
    type = "rate_limit_error"
    code = "route_saturated"

    def __init__(self, message: str, *, retry_after_s: float = 1.0, **kw):
        super().__init__(message, **kw)
        self.retry_after_s = retry_after_s
