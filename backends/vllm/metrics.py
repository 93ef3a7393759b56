"""Replica state from vLLM's Prometheus ``/metrics``, scraped on an interval, and replica
health.

Metrics read (vLLM "Production Metrics" docs; label sets, e.g. per ``model_name``, are
summed):

==========================================  ===============================================
``vllm:num_requests_running``               gauge: sequences in the running batch
``vllm:num_requests_waiting``               gauge: requests queued for a slot
``vllm:kv_cache_usage_perc``                gauge, 0-1 (older releases:
                                            ``vllm:gpu_cache_usage_perc``)
``vllm:prefix_cache_queries_total``         counter: prompt tokens looked up in the cache
``vllm:prefix_cache_hits_total``            counter: of those, tokens found
``vllm:time_to_first_token_seconds``        histogram; ``_sum``/``_count`` deltas between
                                            scrapes give the recent mean TTFT (seconds)
``vllm:cache_config_info``                  info (value 1): labels ``num_gpu_blocks`` and
                                            ``block_size`` give the prefix cache's capacity
                                            (KV blocks of ``block_size`` tokens)
==========================================  ===============================================

Health: a replica is ejected after ``eject_after`` consecutive failures, counting scrape
failures (connect error, timeout, HTTP 5xx) and request failures reported by the backend
(connect errors, timeouts). An ejected replica keeps being scraped; the first successful
scrape (any answer below 500, so a replica without ``/metrics`` still probes back in) puts
it back. A replica whose ``/metrics`` answers 404 is healthy and simply has no metrics.

Size: at most :data:`MAX_METRICS_BYTES` of a ``/metrics`` body are read. A larger one is
read no further (its connection is closed) and that round's values are absent, as for a body
with nothing readable in it; the replica stays healthy (it answered), and one warning without
the body is logged until a scrape fits again. Bodies over :data:`PARSE_INLINE_BYTES` are
parsed in a worker thread, so that a large exposition does not hold the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass

import aiohttp

log = logging.getLogger(__name__)

MAX_METRICS_BYTES = 2 << 20
"""Largest ``/metrics`` body read from a replica (bytes, after decompression; 2 MiB). A real
vLLM's is tens of KB; a replica exporting tens of MB, read whole and parsed on the event
loop, would delay every request the gateway serves."""
PARSE_INLINE_BYTES = 64 << 10
"""``/metrics`` bodies up to this size (bytes) are parsed on the event loop; larger ones in a
worker thread, so a large body never holds the event loop for long (parse time grows
linearly with the body; :func:`read_metrics`)."""


@dataclass
class ReplicaMetrics:
    """The last scrape of one replica (``None``: not reported)."""

    running: float | None = None
    waiting: float | None = None
    kv_cache_usage: float | None = None
    prefix_cache_queries: float | None = None
    prefix_cache_hits: float | None = None
    ttft_sum_s: float | None = None
    ttft_count: float | None = None
    recent_ttft_s: float | None = None
    cache_blocks: int | None = None
    cache_block_size: int | None = None
    scraped_at: float | None = None

    @property
    def cache_tokens(self) -> int | None:
        """Prefix-cache capacity in tokens (``num_gpu_blocks x block_size``), ``None`` when not reported."""
        if not self.cache_blocks or not self.cache_block_size:
            return None
        return self.cache_blocks * self.cache_block_size

    @property
    def prefix_hit_rate(self) -> float | None:
        """Lifetime prefix-cache hit rate (hit tokens / queried tokens), ``None`` before any query."""
        if not self.prefix_cache_queries:
            return None
        return (self.prefix_cache_hits or 0.0) / self.prefix_cache_queries


_NAMES = {
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
    "vllm:kv_cache_usage_perc": "kv_cache_usage",
    "vllm:gpu_cache_usage_perc": "kv_cache_usage",
    "vllm:prefix_cache_queries_total": "prefix_cache_queries",
    "vllm:prefix_cache_hits_total": "prefix_cache_hits",
    "vllm:time_to_first_token_seconds_sum": "ttft_sum_s",
    "vllm:time_to_first_token_seconds_count": "ttft_count",
}


def parse_prometheus(text: str) -> dict[str, float]:
    """Sum of each sample name over its label sets, from Prometheus text exposition format.
    Comment lines and unparsable lines are skipped."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if "{" in line:
            name, _, rest = line.partition("{")
            _, _, value = rest.rpartition("}")
        else:
            name, _, value = line.partition(" ")
        try:
            number = float(value.split()[0])
        except (ValueError, IndexError):
            continue
        if math.isfinite(number):
            out[name.strip()] = out.get(name.strip(), 0.0) + number
    return out


_CONFIG_LABEL = re.compile(r'(num_gpu_blocks|block_size)="(\d+)"')


def cache_config(text: str) -> tuple[int, int] | None:
    """``(num_gpu_blocks, block_size)`` from the ``vllm:cache_config_info`` sample of a
    ``/metrics`` text, ``None`` when absent or without both labels as positive integers."""
    at = text.find("vllm:cache_config_info{")
    if at < 0:
        return None
    labels = dict(_CONFIG_LABEL.findall(text[at:text.find("}", at)]))
    blocks, size = int(labels.get("num_gpu_blocks", 0)), int(labels.get("block_size", 0))
    return (blocks, size) if blocks > 0 and size > 0 else None


def to_metrics(samples: dict[str, float], previous: ReplicaMetrics | None = None,
               config: tuple[int, int] | None = None) -> ReplicaMetrics:
    """:class:`ReplicaMetrics` from parsed samples; ``previous`` gives the TTFT delta;
    ``config`` is :func:`cache_config`'s answer. A value no vLLM reports (negative, not
    finite, a KV-cache usage above 1, more prefix-cache hits than queries) is left out, as
    if not reported: the chooser and ``/metrics`` must not act on a broken exporter's numbers."""
    m = ReplicaMetrics(scraped_at=time.monotonic())
    if config is not None:
        m.cache_blocks, m.cache_block_size = config
    for name, attr in _NAMES.items():
        value = samples.get(name)
        if value is not None and math.isfinite(value) and value >= 0:
            setattr(m, attr, value)
    if m.kv_cache_usage is not None and m.kv_cache_usage > 1:
        m.kv_cache_usage = None
    if (m.prefix_cache_hits or 0) > (m.prefix_cache_queries or 0):
        m.prefix_cache_hits = m.prefix_cache_queries = None
    if previous and previous.ttft_count is not None and m.ttft_count is not None:
        dn = m.ttft_count - previous.ttft_count
        if dn > 0 and m.ttft_sum_s is not None and previous.ttft_sum_s is not None:
            m.recent_ttft_s = (m.ttft_sum_s - previous.ttft_sum_s) / dn
        else:
            m.recent_ttft_s = previous.recent_ttft_s
    return m


def read_metrics(body: bytes, previous: ReplicaMetrics | None = None) -> ReplicaMetrics:
    """:class:`ReplicaMetrics` from a ``/metrics`` body (UTF-8; invalid bytes replaced);
    ``previous`` as for :func:`to_metrics`. CPU-bound: about 1 ms per 128 KiB."""
    text = body.decode("utf-8", errors="replace")
    return to_metrics(parse_prometheus(text), previous, cache_config(text))


async def read_capped(response: aiohttp.ClientResponse, limit: int = MAX_METRICS_BYTES) -> bytes | None:
    """The body of ``response`` if it is at most ``limit`` bytes (after decompression), else
    ``None``: reading stops at the limit (or at once, for a larger ``Content-Length``) and the
    connection is closed rather than drained.

    Raises:
        aiohttp.ClientError, asyncio.TimeoutError: reading the body failed.
    """
    declared = response.content_length
    if declared is None or declared <= limit:
        data = bytearray()
        async for piece in response.content.iter_any():
            data += piece
            if len(data) > limit:
                break
        else:
            return bytes(data)
    response.close()
    return None


def metrics_url(base_url: str) -> str:
    """``/metrics`` of a replica whose OpenAI base URL is ``base_url`` (``.../v1``)."""
    root = base_url[: -len("/v1")] if base_url.endswith("/v1") else base_url
    return root + "/metrics"


class Scraper:
    """Scrapes every replica of a pool each ``interval_s`` seconds (first scrape at once).

    Args:
        pool: the :class:`backends.vllm.pool.Pool` whose replicas are updated.
        client_factory: returns the backend's :class:`aiohttp.ClientSession` (opened lazily).
        interval_s: seconds between scrapes.
    """

    def __init__(self, pool, client_factory, interval_s: float):
        self.pool = pool
        self._client = client_factory
        self.interval_s = interval_s
        self._timeout = aiohttp.ClientTimeout(total=min(5.0, interval_s + 1))
        self._task: asyncio.Task | None = None
        self._over_cap: set[str] = set()  # replicas whose last /metrics was over MAX_METRICS_BYTES

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="vllm-metrics")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001  # shutting down
                pass

    async def _run(self) -> None:
        while True:
            await self.scrape_all()
            await asyncio.sleep(self.interval_s)

    async def scrape_all(self) -> None:
        """Scrape each replica once, concurrently."""
        await asyncio.gather(*(self.scrape(r) for r in self.pool.replicas))

    async def scrape(self, replica) -> None:
        """Scrape one replica; record its metrics, or a failure for its health (a body over
        :data:`MAX_METRICS_BYTES` counts as an answer whose values are all absent)."""
        try:
            async with self._client().get(metrics_url(replica.base_url), timeout=self._timeout) as response:
                status = response.status
                body = await read_capped(response) if status == 200 else b""
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
            log.debug("metrics scrape failed (%s)", type(exc).__name__)
            self.pool.failed(replica, request=False)
            return
        if status >= 500:
            self.pool.failed(replica, request=False)
            return
        self.pool.succeeded(replica, request=False)
        if status != 200:
            return
        if body is None:
            self._too_large(replica)
            return
        self._over_cap.discard(replica.base_url)
        if len(body) <= PARSE_INLINE_BYTES:
            replica.metrics = read_metrics(body, replica.metrics)
        else:
            replica.metrics = await asyncio.to_thread(read_metrics, body, replica.metrics)

    def _too_large(self, replica) -> None:
        """A ``/metrics`` body over the cap: nothing reported this round (the time of the last
        good scrape is kept, so ``scrape_age_seconds`` grows); warn once until one fits."""
        replica.metrics = ReplicaMetrics(scraped_at=replica.metrics.scraped_at)
        if replica.base_url not in self._over_cap:
            self._over_cap.add(replica.base_url)
            log.warning("replica %s: /metrics is larger than %d MiB; not read, its values are absent until a "
                        "scrape fits", replica.shown_url, MAX_METRICS_BYTES >> 20)


def sum_metrics(replicas: Sequence) -> dict[str, float]:
    """Pool totals of the prefix-cache counters (for reports)."""
    q = sum((r.metrics.prefix_cache_queries or 0.0) for r in replicas if r.metrics)
    h = sum((r.metrics.prefix_cache_hits or 0.0) for r in replicas if r.metrics)
    return {"prefix_cache_queries": q, "prefix_cache_hits": h}
