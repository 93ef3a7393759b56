"""Replica bookkeeping and replica choice for a ``vllm`` pool.

The chooser is deliberately a small separate class: prefix affinity (send requests that
share a prompt prefix to the replica whose prefix cache already holds it) will wrap or
replace :class:`LeastLoadedChooser` without touching the transport code.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol


@dataclass
class Replica:
    """One replica of a pool.

    Attributes:
        base_url: the replica's OpenAI base URL, ending in ``/v1`` (no trailing slash).
        in_flight: requests sent to it that have not finished (streams count until closed).
    """

    base_url: str
    in_flight: int = 0


class ReplicaChooser(Protocol):
    """Picks the replica for a request."""

    def choose(self, replicas: Sequence[Replica], body: dict) -> Replica:
        """Return one of ``replicas`` (never empty) for the request ``body``."""
        ...


class LeastLoadedChooser:
    """Least in-flight requests first; ties broken round-robin.

    The round-robin cursor advances past each pick, so equally loaded replicas (e.g. an
    idle pool under sequential traffic) take turns instead of the first one taking all.
    """

    def __init__(self) -> None:
        self._cursor = 0

    def choose(self, replicas: Sequence[Replica], body: dict) -> Replica:
        n = len(replicas)
        least = min(r.in_flight for r in replicas)
        for step in range(n):
            i = (self._cursor + step) % n
            if replicas[i].in_flight == least:
                self._cursor = i + 1
                return replicas[i]
        raise AssertionError("unreachable: some replica has the least in-flight count")


class Pool:
    """The replicas of one backend and how requests are spread over them.

    Args:
        base_urls: replica base URLs (``.../v1``); a trailing slash is removed.
        chooser: replica choice strategy (default :class:`LeastLoadedChooser`).
    """

    def __init__(self, base_urls: Sequence[str], chooser: ReplicaChooser | None = None):
        if not base_urls:
            raise ValueError("a pool needs at least one replica")
        self.replicas = [Replica(u.rstrip("/")) for u in base_urls]
        self.chooser = chooser or LeastLoadedChooser()

    def pick(self, body: dict, exclude: Sequence[Replica] = ()) -> Replica | None:
        """Choose a replica for ``body`` among those not in ``exclude``; ``None`` if none left."""
        left = [r for r in self.replicas if all(r is not e for e in exclude)]
        return self.chooser.choose(left, body) if left else None

    @staticmethod
    @contextmanager
    def occupy(replica: Replica) -> Iterator[Replica]:
        """Count a request as in flight on ``replica`` for the duration of the block."""
        replica.in_flight += 1
        try:
            yield replica
        finally:
            replica.in_flight -= 1
