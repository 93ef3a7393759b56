"""The ``vllm`` backend: OpenAI-compatible HTTP to a pool of replicas.

One pooled :class:`aiohttp.ClientSession` per backend (created by :meth:`VllmBackend.start`,
or lazily on first use; closed by :meth:`VllmBackend.aclose`) sends requests to
``{replica}/chat/completions``, ``{replica}/completions`` or ``{replica}/embeddings``. aiohttp is used directly
because it is the cheapest well-kept asyncio HTTP client here: ``python -m
bench.http_clients`` measures the CPU time per upstream call of httpx, raw aiohttp and this
backend's ``send`` side by side (docs/BENCHMARKS.md). The session keeps no cookies (one
session serves every tenant, so a replica's ``Set-Cookie`` must not come back with other
tenants' requests) and caps no connections (the replicas queue requests themselves, and a
client-side cap would hide that queue from their metrics).

Replica choice is prefix affinity with bounded load
(:class:`backends.vllm.affinity.AffinityChooser`), or
:class:`backends.vllm.pool.LeastLoadedChooser` (least in-flight requests, ties
round-robin) with ``options: {affinity: false}`` (:class:`backends.vllm.options.PoolOptions`).
:meth:`VllmBackend.start` starts a background task scraping each replica's ``/metrics``
(queue depth, KV cache use, prefix-cache hits, TTFT) every ``metrics_interval_s`` (through the
same session, with its own timeout); connect failures and timeouts, of requests and scrapes, eject a replica
after ``eject_after`` in a row, and a successful scrape puts it back
(:mod:`backends.vllm.metrics`). The replica that answered is reported in the call's
:class:`~backends.call.CallReport`.

Timeouts: ``config.connect_timeout_s`` for the TCP/TLS connect; ``config.timeout_s`` bounds
a non-streaming call as a whole (connect, the replica's queue, generation and reading the
answer: a replica that trickles bytes cannot hold a request longer), and for a stream the
longest silence (TTFT, or the gap between two chunks), so a long but live stream is never
cut.

Size limits: a non-streaming answer larger than :data:`MAX_RESPONSE_BYTES`, or a stream
line or event over :data:`backends.vllm.sse.MAX_LINE_CHARS` / ``MAX_EVENT_CHARS``, is an
upstream fault (the stream parser's time is linear in the stream's length, so a huge line
cannot stall the event loop). Answers and chunks are checked for the OpenAI shape where the
gateway reads them (:func:`backends.openai_shapes.check_completion`, ``check_chunk``):
``choices`` a list of objects, message/delta objects, string contents, integer token counts.

Retry within the pool: a connect failure (refused, unreachable, connect timeout) means the
request never reached the replica, so it is safe to resend: the request goes once more to
the least-loaded *other* replica, then :class:`BackendConnectError` is raised. Any failure
after the request was sent (timeouts, 5xx, dropped connections) is raised at once; the
dispatcher's fallback to the next candidate decides what happens then, and a generation that
may have run is never silently duplicated inside the pool.

Error translation happens here, at the edge (see :mod:`backends.errors`):

- HTTP status >= 400 -> :func:`backends.errors.from_status`, with the upstream's message,
  ``param`` and ``code``.
- ``aiohttp.ClientConnectorError`` (refused, unreachable, DNS) and
  ``aiohttp.ConnectionTimeoutError`` -> :class:`BackendConnectError`.
- other timeouts (``aiohttp.ServerTimeoutError``, ``asyncio.TimeoutError``) ->
  :class:`BackendTimeout`.
- other transport errors (server disconnected, connection reset, a body cut short:
  ``aiohttp.ClientError``), invalid JSON, answers of the wrong shape or size ->
  :class:`BackendServerError`.
- an error event in the stream (``data: {"error": {...}}``, or vLLM's older
  ``data: {"object": "error", ...}``) -> ``from_status(error.code or 500)``.
- any of these after the first streamed chunk -> :class:`BackendStreamError`.

Closing a stream early (the client went away) closes its upstream connection, which makes
vLLM abort the generation.

Messages name the backend, never the replica URL or the API key (the key is also redacted
from upstream messages that echo it).
"""

from __future__ import annotations

import asyncio
import codecs
import logging
from collections.abc import AsyncIterator

import aiohttp
import orjson

from backends.base import Backend, Endpoint
from backends.call import NO_CONTEXT, CallContext, CallReport
from backends.errors import (BackendConnectError, BackendError, BackendServerError, BackendStreamError, BackendTimeout,
                             from_status)
from backends.openai_shapes import ShapeError, check_chunk, check_completion
from backends.vllm.affinity import AffinityChooser
from backends.vllm.metrics import Scraper, read_capped
from backends.vllm.options import PoolOptions
from backends.vllm.pool import Pool, Replica
from backends.vllm.sse import SSEDecodeError, decode_events, iter_sse_data, sse_lines
from backends.vllm.upstream_text import retry_after_seconds, scrub, upstream_fields, upstream_message

log = logging.getLogger(__name__)

PATHS: dict[str, str] = {"chat": "/chat/completions", "completions": "/completions", "embeddings": "/embeddings"}
CONNECT_ATTEMPTS = 2
"""Replicas tried for one request when connecting fails (the first choice plus one other)."""
MAX_RESPONSE_BYTES = 64 << 20
"""Largest non-streaming answer read from a replica (bytes, after decompression; 64 MiB):
a larger one is an upstream fault (:class:`BackendServerError`), not something to buffer."""
KEEPALIVE_S = 30.0
"""Seconds an idle keep-alive connection to a replica is kept."""
_JSON = {"content-type": "application/json", "accept": "application/json"}
_SSE = {"content-type": "application/json", "accept": "text/event-stream"}
_TRANSPORT_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError)


class VllmBackend(Backend):
    """Backend for an OpenAI-compatible replica pool; see the module docstring.

    Args:
        config: the policy entry; ``endpoints`` are the replica base URLs (``.../v1``).
        chooser: a replica chooser (``choose(replicas, body) -> Replica``) instead of the
            one the options select (benchmarks compare choosers with it).
    """

    def __init__(self, config, *, chooser=None):
        super().__init__(config)
        self.options = PoolOptions.model_validate(config.options)
        o = self.options
        if chooser is None and o.affinity:
            chooser = AffinityChooser(block_tokens=o.block_tokens, hrw_blocks=o.hrw_blocks, load_factor=o.load_factor,
                                      min_bound=o.min_bound, queue_threshold=o.queue_threshold,
                                      match_threshold=o.match_threshold, balance_new=o.balance_new,
                                      holders=o.prefix_holders, cache_model=o.cache_model,
                                      cache_blocks=o.cache_blocks)
        self.pool = Pool(config.endpoints, chooser, eject_after=o.eject_after, retry_ejected_s=o.retry_ejected_s)
        self._session: aiohttp.ClientSession | None = None
        # A non-streaming call's timeouts: timeout_s also bounds the whole call.
        self._whole = aiohttp.ClientTimeout(total=config.timeout_s, connect=config.connect_timeout_s,
                                            sock_read=config.timeout_s)
        # The metrics scraper shares the backend's session (one connection pool per backend).
        self.scraper = Scraper(self.pool, self._http, o.metrics_interval_s) if o.metrics_interval_s > 0 else None
        self.shared = None

    def share_state(self, redis_url: str, prefix: str, gateway_id: str) -> None:
        """Share in-flight counts and affinity choices with other gateway replicas through
        Redis (:mod:`backends.vllm.shared`); call before :meth:`start`."""
        from backends.vllm.shared import SharedPoolState

        self.shared = SharedPoolState(redis_url, prefix, self.name, gateway_id)

    def preview_replica(self, body: dict, context: CallContext = NO_CONTEXT) -> tuple[str, str] | None:
        """``(replica URL without user info, reason)`` that the pool's chooser would pick for
        ``body`` now, changing no state (:meth:`backends.vllm.pool.Pool.preview`; reasons:
        ``session``, ``prefix_match``, ``rendezvous``, ``overloaded_least_loaded``,
        ``short_prompt``, or ``least_loaded`` with ``affinity: false``; ``retry_ejected`` or ``all_ejected`` when
        the replica is ejected); ``None`` for a chooser without a preview."""
        preview = self.pool.preview(body, context)
        return (preview[0].shown_url, preview[1]) if preview is not None else None

    async def start(self) -> None:
        self._http()
        if self.scraper is not None:
            self.scraper.start()
        if self.shared is not None:
            self.shared.start(self.pool, self.pool.chooser)

    async def aclose(self) -> None:
        if self.shared is not None:
            await self.shared.aclose()
        if self.scraper is not None:
            await self.scraper.stop()
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    def _http(self) -> aiohttp.ClientSession:
        """The backend's session (created on first use; needs a running event loop)."""
        if self._session is None or self._session.closed:
            headers = {}
            if self.config.api_key is not None:
                headers["authorization"] = f"Bearer {self.config.api_key.get_secret_value()}"
            self._session = aiohttp.ClientSession(
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=None, connect=self.config.connect_timeout_s,
                                              sock_read=self.config.timeout_s),
                connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=KEEPALIVE_S),
                cookie_jar=aiohttp.DummyCookieJar(),
            )
        return self._session

    async def _read(self, response: aiohttp.ClientResponse) -> bytes:
        """The body of a non-streaming answer, at most :data:`MAX_RESPONSE_BYTES` (after
        decompression).

        Raises:
            BackendServerError: the body is larger.
        """
        body = await read_capped(response, MAX_RESPONSE_BYTES)
        if body is not None:
            return body
        raise BackendServerError(f"{self.name}: upstream answer is larger than {MAX_RESPONSE_BYTES >> 20} MiB",
                                 backend=self.name)

    async def send(self, endpoint: Endpoint, body: dict, *, context: CallContext = NO_CONTEXT,
                   report: CallReport | None = None) -> dict:
        """POST a non-streaming request; return the parsed response.

        ``stream`` is forced off and ``stream_options`` removed (vLLM rejects
        ``stream_options`` without ``stream``).

        Raises:
            backends.errors.BackendError: see the module docstring.
        """
        payload = {k: v for k, v in body.items() if k != "stream_options"}
        payload["stream"] = False
        return await self._post(endpoint, payload, context, report)

    async def embed(self, body: dict, *, context: CallContext = NO_CONTEXT, report: CallReport | None = None) -> dict:
        """POST ``/embeddings`` to a replica: the pool's choice, with :meth:`send`'s connect
        retry, size cap, shape check (:func:`backends.openai_shapes.check_embeddings`) and errors."""
        return await self._post("embeddings", body, context, report)

    async def _post(self, endpoint: str, payload: dict, context: CallContext, report: CallReport | None) -> dict:
        content = orjson.dumps(payload)
        tried: list[Replica] = []
        while True:
            replica = self._pick(payload, tried, context, report)
            try:
                out = await self._send_to(replica, endpoint, content)
            except BackendConnectError:
                if not self._may_retry(tried, replica):
                    raise
                continue
            self._observe(payload, out)
            return out

    def _observe(self, payload: dict, answer: dict) -> None:
        """Hand an answer's ``usage.prompt_tokens`` to a chooser that learns from it
        (:meth:`backends.vllm.affinity.AffinityChooser.observe_usage`)."""
        observe = getattr(self.pool.chooser, "observe_usage", None)
        usage = answer.get("usage")
        if observe is not None and isinstance(usage, dict):
            observe(payload, usage.get("prompt_tokens"))

    async def _send_to(self, replica: Replica, endpoint: str, content: bytes) -> dict:
        with self.pool.occupy(replica):
            try:
                async with self._http().post(replica.base_url + PATHS[endpoint], data=content, headers=_JSON,
                                             timeout=self._whole) as response:
                    self.pool.succeeded(replica)
                    status, data = response.status, await self._read(response)
                    retry_after = response.headers.get("retry-after")
            except _TRANSPORT_ERRORS as exc:
                raise self._transport_error(exc, replica, started=False) from exc
        if status >= 400:
            raise self._status_error(status, data, retry_after)
        try:
            out = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise BackendServerError(f"{self.name}: upstream sent invalid JSON", backend=self.name) from exc
        if not isinstance(out, dict):
            raise BackendServerError(f"{self.name}: upstream sent a non-object JSON answer", backend=self.name)
        try:
            check_completion(endpoint, out)
        except ShapeError as exc:
            raise BackendServerError(f"{self.name}: upstream sent a malformed answer ({exc})", backend=self.name) from exc
        return out

    async def stream(self, endpoint: Endpoint, body: dict, *, context: CallContext = NO_CONTEXT,
                     report: CallReport | None = None) -> AsyncIterator[dict]:
        """POST a streaming request; yield the upstream's chunk dicts.

        ``stream`` is forced on and ``stream_options.include_usage`` to true. Closing this
        generator closes the upstream response (and so its connection), which cancels the
        generation on the replica.

        Raises:
            backends.errors.BackendError: before the first chunk (retryable classes).
            backends.errors.BackendStreamError: after the first chunk.
        """
        options = {**(body.get("stream_options") or {}), "include_usage": True}
        payload = {**body, "stream": True, "stream_options": options}
        content = orjson.dumps(payload)
        tried: list[Replica] = []
        while True:
            replica = self._pick(payload, tried, context, report)
            sent = 0
            try:
                with self.pool.occupy(replica):
                    response = await self._http().post(replica.base_url + PATHS[endpoint], data=content, headers=_SSE)
                    complete = False
                    try:
                        self.pool.succeeded(replica)
                        if response.status >= 400:
                            data = await self._read(response)
                            raise self._status_error(response.status, data, response.headers.get("retry-after"))
                        async for chunk in self._chunks(response):
                            sent += 1
                            if chunk.get("usage"):
                                self._observe(payload, chunk)
                            yield chunk
                        complete = True
                    finally:
                        # A stream left early (client gone, error) must drop its connection so
                        # that the replica aborts the generation; a finished one is reused.
                        if complete:
                            response.release()
                        else:
                            response.close()
                return
            except _TRANSPORT_ERRORS as exc:
                error = self._transport_error(exc, replica, started=sent > 0)
                if not (isinstance(error, BackendConnectError) and self._may_retry(tried, replica)):
                    raise error from exc

    async def _chunks(self, response: aiohttp.ClientResponse) -> AsyncIterator[dict]:
        """The chunk dicts of an SSE response. A stream that ends without ``[DONE]`` is
        accepted only after some choice finished (servers that omit ``[DONE]``); else it was
        cut short, and raises like a dropped connection. Lines and events over
        :data:`backends.vllm.sse.MAX_LINE_CHARS` / ``MAX_EVENT_CHARS`` and chunks that are not
        OpenAI chunk objects (:func:`backends.openai_shapes.check_chunk`) are upstream faults."""
        started = finished = False
        events = iter_sse_data(sse_lines(_texts(response)))
        while True:
            try:
                data = await anext(events, None)
                if data is None:
                    break
                chunks, done = decode_events(data)
                for chunk in chunks:
                    if not chunk.get("choices") and ("error" in chunk or chunk.get("object") == "error"):
                        raise self._event_error(chunk.get("error", chunk), started)
                    check_chunk(chunk)
            except (SSEDecodeError, ShapeError) as exc:
                cls = BackendStreamError if started else BackendServerError
                raise cls(f"{self.name}: upstream sent invalid stream data ({exc})", backend=self.name) from exc
            for chunk in chunks:
                started = True
                finished = finished or any(c.get("finish_reason") for c in chunk.get("choices") or [])
                yield chunk
            if done:
                return
        if not finished:
            cls = BackendStreamError if started else BackendServerError
            raise cls(f"{self.name}: upstream stream ended before [DONE]", backend=self.name)

    def _pick(self, body: dict, tried: list[Replica], context: CallContext, report: CallReport | None) -> Replica:
        replica = self.pool.pick(body, exclude=tried, context=context)
        if replica is None:  # only reachable if the pool is empty, which Pool forbids
            raise BackendConnectError(f"{self.name}: no replica left to try", backend=self.name)
        if report is not None:
            report.replica = replica.shown_url
        return replica

    def _may_retry(self, tried: list[Replica], replica: Replica) -> bool:
        """Record ``replica`` as tried after a connect failure; whether another may be tried."""
        tried.append(replica)
        return len(tried) < min(CONNECT_ATTEMPTS, len(self.pool.replicas))

    def _transport_error(self, exc: BaseException, replica: Replica, *, started: bool) -> BackendError:
        """Translate an aiohttp / timeout exception into the most specific :class:`BackendError`."""
        kind = type(exc).__name__
        log.warning("backend %s replica %s: %s", self.name, replica.shown_url, kind)
        if started:
            return BackendStreamError(f"{self.name}: upstream stream broke ({kind})", backend=self.name)
        self.pool.failed(replica)  # no answer at all (refused, timed out, dropped, reset): a replica fault
        if isinstance(exc, (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)):
            return BackendConnectError(f"{self.name}: cannot connect to upstream ({kind})", backend=self.name)
        if isinstance(exc, (aiohttp.ServerTimeoutError, asyncio.TimeoutError)):
            return BackendTimeout(f"{self.name}: upstream timed out ({kind})", backend=self.name)
        return BackendServerError(f"{self.name}: upstream connection failed ({kind})", backend=self.name)

    def _status_error(self, status: int, data: bytes, retry_after: str | None = None) -> BackendError:
        message = self._redact(upstream_message(data, status))
        param, code = upstream_fields(data)
        error = from_status(status, f"{self.name}: upstream returned HTTP {status}: {message}", backend=self.name,
                            param=param, code=code)
        seconds = retry_after_seconds(retry_after)
        if status == 429 and seconds is not None:
            error.headers = {"retry-after": seconds}  # sent to the client if no other candidate answers
        return error

    def _event_error(self, error: object, started: bool) -> BackendError:
        detail = error.get("message", "") if isinstance(error, dict) else str(error)
        message = f"{self.name}: upstream stream error: {self._redact(scrub(str(detail)))[:300]}"
        if started:
            return BackendStreamError(message, backend=self.name)
        code = error.get("code") if isinstance(error, dict) else None
        status = code if isinstance(code, int) and 400 <= code < 600 else 500
        param, upstream_code = upstream_fields(error)
        return from_status(status, message, backend=self.name, param=param, code=upstream_code)

    def _redact(self, text: str) -> str:
        key = self.config.api_key.get_secret_value() if self.config.api_key is not None else ""
        return text.replace(key, "***") if key else text


async def _texts(response: aiohttp.ClientResponse) -> AsyncIterator[str]:
    """The body of ``response`` as UTF-8 text pieces, in arrival order (a character split
    across two reads is joined; invalid bytes become U+FFFD)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    async for data in response.content.iter_any():
        text = decoder.decode(data)
        if text:
            yield text
    tail = decoder.decode(b"", final=True)
    if tail:
        yield tail
