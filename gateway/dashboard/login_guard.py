"""Guards of ``POST /dashboard/login``: the form must come from the dashboard's own origin,
and failed logins are throttled per source address.

Origin: a browser sends ``Origin`` (and ``Sec-Fetch-Site``) with every POST; a login posted
by another site's page is refused (login CSRF: the victim's browser would be signed in to
the attacker's session). A request with neither header (curl, scripts) is no browser's
cross-site request and passes.

Throttle: at most ``attempts`` failures per source address in any 60 s; past that, the
source gets 429 until its oldest failure is a minute old, whatever key it sends (so a
correct guess cannot be told apart). The count is per process: behind a proxy every client
shares the proxy's address. Written here rather than on the API's rate limiter because
it counts failures, not requests, and must work without Redis.
"""

from __future__ import annotations

import time
from collections import deque
from urllib.parse import urlsplit

WINDOW_S = 60.0
MAX_SOURCES = 10_000
"""Sources tracked at once; past it, sources with no failure in the window are forgotten first."""
_DEFAULT_PORTS = {"http": 80, "https": 443}


def same_origin(headers) -> bool:
    """Whether a POST's ``Origin`` (or ``Sec-Fetch-Site``) says it comes from the page of the
    ``Host`` it was sent to; ``True`` when the client sent neither header."""
    site = (headers.get("sec-fetch-site") or "").lower()
    if site and site not in ("same-origin", "none"):
        return False
    origin = headers.get("origin")
    if origin is None:
        return True
    try:
        parts = urlsplit(origin.strip())
        default = _DEFAULT_PORTS.get(parts.scheme)
        origin_at = (parts.hostname, parts.port or default)
        host = urlsplit("//" + (headers.get("host") or "").strip().lower())
        host_at = (host.hostname, host.port or default)
    except ValueError:  # a malformed port
        return False
    return default is not None and parts.hostname is not None and origin_at == host_at


class LoginThrottle:
    """Failed logins per source address in a sliding minute.

    Args:
        attempts: failures allowed per source per minute (``MIXROUTE_DASHBOARD_LOGIN_ATTEMPTS``).
    """

    def __init__(self, attempts: int) -> None:
        self.attempts = attempts
        self._failures: dict[str, deque[float]] = {}

    def retry_after(self, source: str, now: float | None = None) -> float:
        """Seconds until ``source`` may try again (0: now)."""
        now = time.monotonic() if now is None else now
        failures = self._recent(source, now)
        if len(failures) < self.attempts:
            return 0.0
        return max(0.0, failures[-self.attempts] + WINDOW_S - now)

    def failed(self, source: str, now: float | None = None) -> int:
        """Count a failure of ``source``; returns its failures in the last minute."""
        now = time.monotonic() if now is None else now
        if source not in self._failures and len(self._failures) >= MAX_SOURCES:
            self._forget_idle(now)
        failures = self._failures.setdefault(source, deque())
        failures.append(now)
        return len(self._recent(source, now))

    def _recent(self, source: str, now: float) -> deque[float]:
        failures = self._failures.get(source, deque())
        while failures and failures[0] <= now - WINDOW_S:
            failures.popleft()
        return failures

    def _forget_idle(self, now: float) -> None:
        self._failures = {s: f for s, f in self._failures.items() if f and f[-1] > now - WINDOW_S}
        while len(self._failures) >= MAX_SOURCES:  # all active: the oldest go first
            self._failures.pop(next(iter(self._failures)))
