"""The root of every mixroute error, and the backends' errors: every transport or provider
failure is translated at the backend edge into one of these, so the dispatcher decides on
fallback from the class alone.

:class:`MixrouteError` stands here, on the floor, so that the backends need nothing from the
layers above; the routing layer's errors (:mod:`router.errors`) derive from it too.

Tree::

    MixrouteError                    500 api_error        internal_error
    ├── (the routing layer's errors: see :mod:`router.errors`)
    └── BackendError                 502 api_error        upstream_error   (retryable)
        ├── BackendConnectError      502                  upstream_connect_error   (retryable)
        ├── BackendTimeout           504                  upstream_timeout         (retryable)
        ├── BackendRateLimited       429 rate_limit_error upstream_rate_limited    (retryable)
        ├── BackendServerError       502                  upstream_server_error    (retryable)
        │   (401/403/404 upstream:   code upstream_unavailable: a bad provider key or a model
        │    missing upstream is the backend's fault; retryable)
        ├── BackendRejected          400 invalid_request_error upstream_rejected   (not retryable:
        │   │                                             the same request fails everywhere;
        │   │                                             the upstream's param is kept)
        │   └── BackendContextExceeded 400                context_length_exceeded  (retryable: a
        │                                                 candidate with a larger window can answer)
        └── BackendStreamError       502                  upstream_stream_error    (after first byte;
                                                          ends the stream with an error event)
"""

from __future__ import annotations


class MixrouteError(Exception):
    """Base error. Subclasses set ``status``, ``type`` and ``code``.

    Args:
        message: human-readable message, safe to show to the client (no secrets).
        param: the request field at fault, if any.
        code: overrides the class's stable ``code``.
    """

    status: int = 500
    type: str = "api_error"
    code: str = "internal_error"

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code

    def to_envelope(self) -> dict:
        """The OpenAI error envelope for this error, plus any top-level ``envelope_extra``
        (the ``mixroute`` view of a refused dry run)."""
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code},
                **getattr(self, "envelope_extra", {})}


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


class BackendContextExceeded(BackendRejected):
    """The prompt is too long for this backend's model: not a bad request (the engine
    estimates tokens, the upstream counts them), so another candidate, with a larger
    context window, may answer. Clients get OpenAI's code, on which SDK users shorten the
    conversation (the gateway raises it itself too, :class:`router.errors.ContextTooLong`)."""

    code = "context_length_exceeded"
    retryable = True


class BackendStreamError(BackendError):
    code = "upstream_stream_error"


def from_status(status: int, message: str, *, backend: str, param: str | None = None,
                code: str | None = None) -> BackendError:
    """Map an upstream HTTP status to the most specific :class:`BackendError`.

    Args:
        param: the upstream error's ``param`` (the request field at fault); kept on a
            :class:`BackendRejected` only, the one class that blames the request.
        code: the upstream error's ``code``; ``context_length_exceeded`` on a 4xx
            rejection gives :class:`BackendContextExceeded`, other codes are not kept.
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
    cls = BackendContextExceeded if code == BackendContextExceeded.code else BackendRejected
    return cls(message, backend=backend, upstream_status=status, param=param)
