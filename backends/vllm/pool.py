"""Replica bookkeeping and replica choice for a ``vllm`` pool.

The chooser is a small separate class: :class:`LeastLoadedChooser` here, and prefix
affinity (:class:`backends.vllm.affinity.AffinityChooser`: send requests that share a
prompt prefix to the replica whose prefix cache already holds it) wraps it.

Health: :meth:`Pool.failed` / :meth:`Pool.succeeded` count consecutive failures per
replica (reported by the backend and by the metrics scraper,
:mod:`backends.vllm.metrics`); after ``eject_after`` of them the replica is ejected and
:meth:`Pool.pick` skips it until a success puts it back: the scraper's next good scrape,
or, once ``retry_ejected_s`` have passed since it was ejected, a request let through to
try it (one failure then ejects it again for as long). Once a *request* has failed, only a
request's success clears the replica: a wedged engine often still serves ``/metrics``, and
its good scrapes used to put it back every interval while its requests kept timing out.
When every replica is ejected they are all tried anyway (failing open beats refusing every
request); ``POST /v1/route`` then names the replica with the reason ``all_ejected``
(:meth:`Pool.preview`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol

from yarl import URL

from backends.call import NO_CONTEXT, CallContext
from backends.vllm.metrics import ReplicaMetrics

log = logging.getLogger("mixroute.pool")

EJECT_AFTER = 3
"""Consecutive failures after which a replica is ejected."""
RETRY_EJECTED_S = 10.0
"""Seconds after which an ejected replica may be tried again by a request."""


@dataclass
class Replica:
    """One replica of a pool.

    Attributes:
        base_url: the replica's OpenAI base URL, ending in ``/v1`` (no trailing slash).
        in_flight: requests this gateway sent to it that have not finished (streams count
            until closed).
        remote_in_flight: the other gateway replicas' in-flight requests to it, as last
            shared through Redis (:mod:`backends.vllm.shared`; 0 without Redis).
        metrics: its last scraped ``/metrics`` (empty until the first scrape).
        failures: consecutive failures (requests or scrapes).
        request_failed: a request failed since the last successful request (then a good
            scrape neither resets ``failures`` nor puts the replica back).
        healthy: ``False`` while ejected.
        ejected_at: ``time.monotonic()`` of the last ejection (or failed retry).
    """

    base_url: str
    in_flight: int = 0
    remote_in_flight: int = 0
    metrics: ReplicaMetrics = field(default_factory=ReplicaMetrics)
    failures: int = 0
    request_failed: bool = False
    healthy: bool = True
    ejected_at: float = 0.0

    @cached_property
    def shown_url(self) -> str:
        """:attr:`base_url` without user info (:func:`safe_url`), for logs, metric labels and
        ``/v1/route``: credentials in an endpoint URL must not leave the process."""
        return safe_url(self.base_url)

    @property
    def load(self) -> int:
        """In-flight requests from every gateway replica (this one's exact, others' as last shared)."""
        return self.in_flight + self.remote_in_flight

    @property
    def queue(self) -> float:
        """Requests waiting on the replica as last scraped (0 when unknown)."""
        return self.metrics.waiting or 0.0


def safe_url(url: str) -> str:
    """``url`` without user info, for logs, metric labels and ``/v1/route`` (``<unparsable
    URL>`` if it cannot be parsed)."""
    try:
        return str(URL(url).with_user(None))
    except (ValueError, TypeError):
        return "<unparsable URL>"


class ReplicaChooser(Protocol):
    """Picks the replica for a request."""

    def choose(self, replicas: Sequence[Replica], body: dict, context: CallContext = NO_CONTEXT) -> Replica:
        """Return one of ``replicas`` (never empty) for the request ``body`` (``context``:
        the call's session, which a chooser may keep on one replica)."""
        ...


class LeastLoadedChooser:
    """Least in-flight requests (all gateway replicas' when shared) first; ties broken round-robin.

    The round-robin cursor advances past each pick, so equally loaded replicas (e.g. an
    idle pool under sequential traffic) take turns instead of the first one taking all. Sessions are not kept on a
    replica: that is part of prefix affinity (:class:`backends.vllm.affinity.AffinityChooser`).
    """

    def __init__(self) -> None:
        self._cursor = 0

    def choose(self, replicas: Sequence[Replica], body: dict, context: CallContext = NO_CONTEXT) -> Replica:
        i = self._next(replicas)
        self._cursor = i + 1
        return replicas[i]

    def peek(self, replicas: Sequence[Replica], body: dict, context: CallContext = NO_CONTEXT) -> Replica:
        """The replica :meth:`choose` would return now, without moving the cursor."""
        return replicas[self._next(replicas)]

    def preview(self, replicas: Sequence[Replica], body: dict,
                context: CallContext = NO_CONTEXT) -> tuple[Replica, str]:
        """``(replica, "least_loaded")``: :meth:`peek` with the reason ``/v1/route`` shows."""
        return self.peek(replicas, body), "least_loaded"

    def _next(self, replicas: Sequence[Replica]) -> int:
        n = len(replicas)
        least = min(r.load for r in replicas)
        for step in range(n):
            i = (self._cursor + step) % n
            if replicas[i].load == least:
                return i
        raise AssertionError("unreachable: some replica has the least in-flight count")


class Pool:
    """The replicas of one backend and how requests are spread over them.

    Args:
        base_urls: replica base URLs (``.../v1``); a trailing slash is removed.
        chooser: replica choice strategy (default :class:`LeastLoadedChooser`).
        eject_after: consecutive failures that eject a replica.
        retry_ejected_s: seconds after an ejection when requests may try the replica again.
    """

    def __init__(self, base_urls: Sequence[str], chooser: ReplicaChooser | None = None,
                 eject_after: int = EJECT_AFTER, retry_ejected_s: float = RETRY_EJECTED_S):
        if not base_urls:
            raise ValueError("a pool needs at least one replica")
        self.replicas = [Replica(u.rstrip("/")) for u in base_urls]
        self.chooser = chooser or LeastLoadedChooser()
        self.eject_after = eject_after
        self.retry_ejected_s = retry_ejected_s

    def pick(self, body: dict, exclude: Sequence[Replica] = (), context: CallContext = NO_CONTEXT) -> Replica | None:
        """Choose a replica for ``body`` (of a call with ``context``) among those not in
        ``exclude`` (ejected ones only when no healthy one is left); ``None`` if none left."""
        left = self._eligible(exclude)
        return self.chooser.choose(left, body, context) if left else None

    def preview(self, body: dict, context: CallContext = NO_CONTEXT) -> tuple[Replica, str] | None:
        """The replica :meth:`pick` would choose for ``body`` now, and the chooser's reason,
        without changing any state (the chooser's ``preview``: nothing learned or counted);
        ``None`` when the chooser has no ``preview`` (e.g. a benchmark's).

        When that replica is ejected the reason says why a request would still go there:
        ``retry_ejected`` (its ``retry_ejected_s`` have passed: a request is let through to
        try it) or ``all_ejected`` (every replica is ejected and none is due for a retry, so
        the pool fails open and the chooser picks among all of them)."""
        preview = getattr(self.chooser, "preview", None)
        if preview is None:
            return None
        replica, reason = preview(self._eligible(()), body, context)
        if not replica.healthy:
            due = time.monotonic() - replica.ejected_at >= self.retry_ejected_s
            reason = "retry_ejected" if due else "all_ejected"
        return replica, reason

    def _eligible(self, exclude: Sequence[Replica]) -> list[Replica]:
        """Replicas not in ``exclude``: the healthy ones (and ejected ones due for a retry),
        or all of them when none is."""
        left = [r for r in self.replicas if all(r is not e for e in exclude)]
        now = time.monotonic()
        healthy = [r for r in left if r.healthy or now - r.ejected_at >= self.retry_ejected_s]
        return healthy or left

    def failed(self, replica: Replica, *, request: bool = True) -> None:
        """Count a failure of ``replica`` (``request``: of a request, else of a scrape);
        eject it at ``eject_after`` in a row."""
        replica.failures += 1
        replica.request_failed = replica.request_failed or request
        if replica.failures >= self.eject_after:
            if replica.healthy:
                log.warning("replica %s ejected after %d failures in a row (%s)", replica.shown_url,
                            replica.failures, "requests" if replica.request_failed else "metrics scrapes")
            replica.healthy = False
            replica.ejected_at = time.monotonic()

    def succeeded(self, replica: Replica, *, request: bool = True) -> None:
        """Reset ``replica``'s failure count and put it back if it was ejected; a good scrape
        (``request=False``) does not vouch for a replica whose requests failed."""
        if not request and replica.request_failed:
            return
        if not replica.healthy:
            log.warning("replica %s is back (a %s succeeded)", replica.shown_url, "request" if request else "scrape")
        replica.failures = 0
        replica.request_failed = False
        replica.healthy = True

    @staticmethod
    @contextmanager
    def occupy(replica: Replica) -> Iterator[Replica]:
        """Count a request as in flight on ``replica`` for the duration of the block."""
        replica.in_flight += 1
        try:
            yield replica
        finally:
            replica.in_flight -= 1
