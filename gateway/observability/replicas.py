"""Per-replica gauges of the live policy's ``vllm`` pools, read at scrape time.

Nothing is recorded on the request path: each scrape of ``/metrics`` walks the current
runtime's ``vllm`` backends (:class:`backends.vllm.pool.Replica`) and reports what the pool
already holds. Backends a policy reload removed are gone from the next scrape; values the
replica's ``/metrics`` has not reported (yet) are absent, not 0.

Names (labels ``backend``, ``replica``: the replica's base URL without user info)::

    mixroute_replica_healthy                  1 while not ejected, 0 while ejected
    mixroute_replica_in_flight                this gateway's requests to it, not finished
    mixroute_replica_requests_waiting         scraped vllm:num_requests_waiting
    mixroute_replica_requests_running         scraped vllm:num_requests_running
    mixroute_replica_kv_cache_usage_ratio     scraped vllm:kv_cache_usage_perc (0-1)
    mixroute_replica_prefix_cache_hit_ratio   scraped hits / queries (lifetime counters, 0-1)
    mixroute_replica_scrape_age_seconds       seconds since the last successful scrape (s)
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

LABELS = ["backend", "replica"]

#: name suffix, help text, value of a replica (``None``: absent).
GAUGES = (
    ("healthy", "1 while the replica is in its pool's rotation, 0 while ejected.",
     lambda r: 1.0 if r.healthy else 0.0),
    ("in_flight", "This gateway's requests to the replica that have not finished.",
     lambda r: float(r.in_flight)),
    ("requests_waiting", "Requests waiting on the replica (scraped vllm:num_requests_waiting).",
     lambda r: r.metrics.waiting),
    ("requests_running", "Requests in the replica's running batch (scraped vllm:num_requests_running).",
     lambda r: r.metrics.running),
    ("kv_cache_usage_ratio", "KV-cache usage of the replica, 0-1 (scraped vllm:kv_cache_usage_perc).",
     lambda r: r.metrics.kv_cache_usage),
    ("prefix_cache_hit_ratio", "Prefix-cache hit tokens / queried tokens since the replica started "
     "(scraped vllm:prefix_cache_*_total).", lambda r: r.metrics.prefix_hit_rate),
    ("scrape_age_seconds", "Seconds since the replica's /metrics was last scraped successfully (s).",
     lambda r: None if r.metrics.scraped_at is None else max(0.0, time.monotonic() - r.metrics.scraped_at)),
)


class ReplicaCollector(Collector):
    """Reads the replicas of the current policy's ``vllm`` backends at each scrape.

    ``policies`` (a :class:`gateway.runtime.PolicyHolder`) is attached by ``GET /metrics``
    (``None`` before: nothing is reported).
    """

    def __init__(self) -> None:
        self.policies: Any = None

    def describe(self) -> list:
        return []  # the pools exist only once the policy is loaded

    def collect(self) -> Iterator[GaugeMetricFamily]:
        runtime = getattr(self.policies, "current", None)
        if runtime is None:
            return
        pools = [(name, b.pool) for name, b in sorted(runtime.backends.items()) if b.config.kind == "vllm"]
        rows = [(name, r.shown_url, r) for name, pool in pools for r in list(pool.replicas)]
        for suffix, doc, value in GAUGES:
            family = GaugeMetricFamily(f"mixroute_replica_{suffix}", doc, labels=LABELS)
            for name, url, replica in rows:
                v = value(replica)
                if v is not None:
                    family.add_metric([name, url], v)
            yield family
