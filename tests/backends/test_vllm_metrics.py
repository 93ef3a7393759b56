"""The pool's scrape of each replica's ``/metrics`` (backends/vllm/metrics.py): size cap and
where the body is parsed, against a fake replica served over real HTTP."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest
from starlette.applications import Starlette
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from backends.config import BackendConfig
from backends.vllm.backend import VllmBackend
import backends.vllm.metrics as metrics_module
from backends.vllm.metrics import MAX_METRICS_BYTES, PARSE_INLINE_BYTES
from tests.backends.fake_upstream import serve_in_thread

GOOD = (b"# TYPE vllm:num_requests_waiting gauge\n"
        b'vllm:num_requests_waiting{model_name="m"} 2.0\n'
        b'vllm:kv_cache_usage_perc{model_name="m"} 0.25\n')
#: A line that would add 1 waiting request per copy if an oversized body were parsed.
FILLER = b'vllm:num_requests_waiting{model_name="m",engine="x"} 1.0\n'


class MetricsReplica:
    """A replica whose ``/metrics`` answers ``body`` with a Content-Length, or with
    ``endless`` a chunked body that never ends (``body``, then :data:`FILLER` in 64 KiB pieces
    until the client hangs up, which sets ``hung_up``)."""

    def __init__(self) -> None:
        self.body, self.endless, self.hung_up = GOOD, False, threading.Event()

        async def metrics(request):
            if not self.endless:
                return Response(self.body, media_type="text/plain")

            async def pieces():
                try:
                    yield self.body
                    while True:
                        yield FILLER * ((64 << 10) // len(FILLER))
                        await asyncio.sleep(0)  # lets Starlette see the disconnect and cancel this
                finally:
                    self.hung_up.set()
            return StreamingResponse(pieces(), media_type="text/plain")

        self.server = serve_in_thread(app=Starlette(routes=[Route("/metrics", metrics)]))

    def backend(self) -> VllmBackend:
        """A pool of this one replica (credentials in its URL); its scraper is not started:
        tests call ``scraper.scrape_all()``."""
        url = self.server.v1().replace("http://", "http://scraper:s3cret@")
        return VllmBackend(BackendConfig(name="pool", kind="vllm", model="m", endpoints=[url],
                                         options={"metrics_interval_s": 60, "eject_after": 1}))


@pytest.fixture(scope="module")
def replica():
    server = MetricsReplica()
    yield server
    server.server.stop()


@pytest.mark.parametrize("endless", [False, True], ids=["content-length", "endless"])
async def test_an_oversized_metrics_body_is_not_read_and_reports_nothing(replica, endless, caplog):
    """From a break-it pass: a replica serving 32 MB of metrics every 2 s was read whole and
    parsed on the event loop (the gateway's /healthz p99 went to 0.5 s)."""
    caplog.set_level(logging.WARNING, logger="backends.vllm.metrics")
    replica.body, replica.endless = GOOD, False
    backend = replica.backend()
    [r] = backend.pool.replicas
    try:
        await backend.scraper.scrape_all()
        assert (r.metrics.waiting, r.metrics.kv_cache_usage) == (2.0, 0.25)
        good_at = r.metrics.scraped_at

        replica.body = GOOD if endless else GOOD + FILLER * (16 * MAX_METRICS_BYTES // len(FILLER))
        replica.endless = endless
        for _ in range(2):
            replica.hung_up.clear()
            await backend.scraper.scrape_all()
            assert r.healthy  # it answered: no failure counted (an endless body used to time out)
            assert (r.metrics.waiting, r.metrics.kv_cache_usage) == (None, None)  # not reported this round
            assert r.metrics.scraped_at == good_at  # scrape_age_seconds keeps growing
            assert not endless or replica.hung_up.wait(5)  # the scrape closed its connection
        warnings = [rec.getMessage() for rec in caplog.records if rec.name == "backends.vllm.metrics"]
        assert len(warnings) == 1, warnings  # once, not every interval
        assert "larger than 2 MiB" in warnings[0] and "vllm:" not in warnings[0] and "s3cret" not in warnings[0]

        replica.body, replica.endless = GOOD, False  # fits again: read as before
        await backend.scraper.scrape_all()
        assert r.metrics.waiting == 2.0 and r.metrics.scraped_at > good_at
    finally:
        await backend.aclose()


async def test_a_large_body_under_the_cap_is_read_and_parsed_off_the_event_loop(replica, monkeypatch):
    parsed_on = []
    read = metrics_module.read_metrics

    def spy(body, previous=None):
        parsed_on.append(threading.get_ident())
        return read(body, previous)

    monkeypatch.setattr(metrics_module, "read_metrics", spy)
    replica.endless = False
    backend = replica.backend()
    [r] = backend.pool.replicas
    try:
        for size, body in (("small", GOOD), ("large", b"# padding\n" * (PARSE_INLINE_BYTES // 10) + GOOD)):
            replica.body = body
            await backend.scraper.scrape_all()
            assert (r.metrics.waiting, r.metrics.kv_cache_usage) == (2.0, 0.25), size
    finally:
        await backend.aclose()
    small, large = parsed_on
    assert small == threading.get_ident() and large != threading.get_ident()
