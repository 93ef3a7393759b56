"""Backend errors: every transport or provider failure is translated at the backend
edge into one of these, so the dispatcher decides on fallback from the class alone.

Tree::

    BackendError                 502 api_error        upstream_error   (retryable)
    ├── BackendConnectError      502                  upstream_connect_error   (retryable)
    ├── BackendTimeout           504                  upstream_timeout         (retryable)
    ├── BackendRateLimited       429 rate_limit_error upstream_rate_limited    (retryable)
    ├── BackendServerError       502                  upstream_server_error    (retryable)
    │   (401/403/404 upstream:   code upstream_unavailable: a bad provider key or a model
    │    missing upstream is the backend's fault; retryable)
    ├── BackendRejected          400 invalid_request_error upstream_rejected   (not retryable:
    │                                                 the same request fails everywhere)
    │   (the upstream's param is kept, and its code when context_length_exceeded; that
    │    one is retryable: a candidate with a larger context window can answer)
    └── BackendStreamError       502                  upstream_stream_error    (after first byte;
                                                      ends the stream with an error event)
"""

from __future__ import annotations

from router.errors import MixrouteError


class BackendError(MixrouteError):
    """A backend failed. ``retryable`` tells the dispatcher to try the next candidate.

    Attributes:
        backend: the backend name from the policy.
        upstream_status: the HTTP status the upstream returned, if any.
    """

    status = 502
    type = "api_error"
    code = "upstream_error"
    retryable = True

    def __init__(self, message: str, *, backend: str = "", upstream_status: int | None = None, **kw):
        super().__init__(message, **kw)
        self.backend = backend
        self.upstream_status = upstream_status


class BackendConnectError(BackendError):
    code = "upstream_connect_error"


class BackendTimeout(BackendError):
    status = 504
    code = "upstream_timeout"


class BackendRateLimited(BackendError):
    status = 429
    type = "rate_limit_error"
    code = "upstream_rate_limited"


class BackendServerError(BackendError):
    code = "upstream_server_error"


class BackendRejected(BackendError):
    status = 400
    type = "invalid_request_error"
    code = "upstream_rejected"
    retryable = False


class BackendStreamError(BackendError):
    code = "upstream_stream_error"


UPSTREAM_CODES = frozenset({"context_length_exceeded"})
"""Upstream error codes a :class:`BackendRejected` keeps instead of ``upstream_rejected``:
clients act on them (SDK users shorten the conversation on ``context_length_exceeded``,
which the gateway raises itself too, :class:`router.errors.ContextTooLong`)."""


def from_status(status: int, message: str, *, backend: str, param: str | None = None,
                code: str | None = None) -> BackendError:
    """Map an upstream HTTP status to the most specific :class:`BackendError`.

    Args:
        param: the upstream error's ``param`` (the request field at fault); kept on a
            :class:`BackendRejected` only, the one class that blames the request.
        code: the upstream error's ``code``; kept on a :class:`BackendRejected` when it is
            one of :data:`UPSTREAM_CODES`.
    """
    if status == 429:
        return BackendRateLimited(message, backend=backend, upstream_status=status)
    if status in (408, 504):
        return BackendTimeout(message, backend=backend, upstream_status=status)
    if status >= 500:
        return BackendServerError(message, backend=backend, upstream_status=status)
    if status in (401, 403, 404):
        # A bad provider key or a model missing upstream is this backend's problem, not the
        # request's: another candidate can still answer.
        return BackendError(message, backend=backend, upstream_status=status, code="upstream_unavailable")
    rejected = BackendRejected(message, backend=backend, upstream_status=status, param=param,
                               code=code if code in UPSTREAM_CODES else None)
    if rejected.code == "context_length_exceeded":
        # Too long for this model, not a bad request: a candidate with a larger context
        # window can answer it (the engine estimates tokens, the upstream counts them).
        rejected.retryable = True
    return rejected
