"""A fake vLLM replica: an ASGI app that serves the OpenAI API with a modelled prefix cache.

Used by ``tests/backends/test_affinity.py`` and ``bench/prefix_cache.py``.

What it models:

- **Tokens**: a prompt is rendered (tools as JSON, then ``<|role|>`` and the content per
  message; the ``prompt`` of a completion) and split into tokens by the regex
  ``\\w+|[^\\w\\s]`` (words and single punctuation marks), a stand-in for a BPE tokenizer. It
  differs on purpose from the gateway's chars/4 estimate (:mod:`backends.vllm.blocks`), so
  the gateway's affinity never sees the replica's block boundaries, as with a real vLLM.
- **Prefix cache**: vLLM's hash-based automatic prefix caching: full blocks of
  ``block_tokens`` tokens, each hashed with its parent's hash; a request reuses the longest
  run of leading blocks present; afterwards all its full blocks are in the cache. The cache
  is an LRU over ``capacity_blocks`` blocks (vLLM evicts free blocks least recently used
  first and, among one request's blocks, the tail first; see :meth:`ReplicaState.insert`).
- **Time**: a request waits for one of ``max_num_seqs`` sequence slots, then for the
  replica's prefill engine (it counts as ``waiting`` until its prefill starts, as vLLM
  counts requests not yet scheduled), which prefills one request at a time: ``prefill_base_s + uncached tokens x prefill_s_per_token``; TTFT is measured
  from arrival. Then ``max_tokens`` (default ``output_tokens``) tokens are decoded, one
  every ``itl_s`` seconds, concurrently with other sequences.
- **Metrics**: ``/metrics`` in Prometheus text with vLLM's names:
  ``vllm:num_requests_running``, ``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc``,
  ``vllm:prefix_cache_queries_total`` and ``vllm:prefix_cache_hits_total`` (tokens),
  ``vllm:time_to_first_token_seconds`` (histogram), ``vllm:request_success_total``,
  ``vllm:cache_config_info`` (labels ``num_gpu_blocks`` = the capacity, ``block_size``).
  Usage reports ``prompt_tokens_details.cached_tokens``.
- **Miss causes** (for benchmarks, not a vLLM metric): ``state.misses`` counts uncached
  prompt tokens by cause (:data:`MISS_KINDS`), using a ledger of which replicas ever
  cached each block, shared by the replicas of one :func:`serve_replicas`.

What it does not model: real compute (everything is ``asyncio.sleep``), chunked prefill
and batching effects on decode speed, KV blocks pinned by running sequences (the cache
evicts regardless), preemption, memory limits other than the cache capacity, sampling.
Answers are the words ``tok0 tok1 ...``.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import socket
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import lru_cache

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

_TOKEN = re.compile(r"\w+|[^\w\s]")
MISS_KINDS = ("new", "partial", "evicted", "elsewhere")
"""Causes of uncached prompt tokens, per block: ``new`` (no replica ever cached this block:
a compulsory miss, e.g. a tenant's first request or text that differs from every earlier
prompt), ``partial`` (the last, partial block, which vLLM never caches), ``evicted`` (this
replica cached the block earlier and evicted it: capacity), ``elsewhere`` (only other
replicas ever cached it: a replica-choice miss). Block hashes are chained, so every block
after the first difference is ``new``."""
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)


@dataclass(frozen=True)
class ReplicaModel:
    """Parameters of the modelled replica (times in seconds, sizes in tokens/blocks)."""

    block_tokens: int = 16
    capacity_blocks: int = 2048
    max_num_seqs: int = 16
    prefill_base_s: float = 0.002
    prefill_s_per_token: float = 0.00002
    itl_s: float = 0.004
    output_tokens: int = 8


@dataclass
class ReplicaState:
    """Counters and the cache of one fake replica."""

    model: ReplicaModel
    cache: OrderedDict = field(default_factory=OrderedDict)
    running: int = 0
    waiting: int = 0
    queries: int = 0
    hits: int = 0
    requests: int = 0
    ttft_sum: float = 0.0
    ttft_count: int = 0
    ttft_samples: list[float] = field(default_factory=list)
    ttft_buckets: list[int] = field(default_factory=lambda: [0] * len(TTFT_BUCKETS))
    index: int = 0
    ledger: dict[int, int] = field(default_factory=dict)
    misses: dict[str, int] = field(default_factory=lambda: dict.fromkeys(MISS_KINDS, 0))

    def reset(self) -> None:
        """Empty the cache and zero the counters (and the shared ledger)."""
        self.cache.clear()
        self.ledger.clear()
        self.misses = dict.fromkeys(MISS_KINDS, 0)
        self.queries = self.hits = self.requests = 0
        self.ttft_sum = 0.0
        self.ttft_count = 0
        self.ttft_samples = []
        self.ttft_buckets = [0] * len(TTFT_BUCKETS)

    def lookup(self, hashes: list[int]) -> int:
        """Leading blocks of ``hashes`` in the cache (touched as recently used)."""
        n = 0
        for h in hashes:
            if h not in self.cache:
                break
            self.cache.move_to_end(h)
            n += 1
        return n

    def classify_misses(self, hashes: list[int], cached_blocks: int, n_tokens: int) -> None:
        """Add the uncached tokens of one request to :attr:`misses`, by cause (see
        :data:`MISS_KINDS`)."""
        bt, me = self.model.block_tokens, 1 << self.index
        self.misses["partial"] += n_tokens - len(hashes) * bt
        for h in hashes[cached_blocks:]:
            mask = self.ledger.get(h, 0)
            kind = "new" if not mask else "evicted" if mask & me else "elsewhere"
            self.misses[kind] += bt

    def insert(self, hashes: list[int]) -> None:
        """Cache ``hashes`` (a request's full blocks, in prompt order) as most recently used.

        Tail first, so that among one request's blocks the tail is evicted first: vLLM frees
        a finished request's blocks in reverse order, because the tail blocks are the least
        likely to be shared by other requests (vLLM design docs, "Automatic Prefix Caching",
        eviction). Inserting head first would evict a shared system prompt before the
        request's private tail.
        """
        me = 1 << self.index
        for h in reversed(hashes):
            self.cache[h] = None
            self.cache.move_to_end(h)
            self.ledger[h] = self.ledger.get(h, 0) | me
        while len(self.cache) > self.model.capacity_blocks:
            self.cache.popitem(last=False)

    def observe_ttft(self, seconds: float) -> None:
        self.ttft_sum += seconds
        self.ttft_count += 1
        self.ttft_samples.append(seconds)
        for i, le in enumerate(TTFT_BUCKETS):
            if seconds <= le:
                self.ttft_buckets[i] += 1


def render_parts(body: dict) -> list[str]:
    """The prompt the fake replica tokenizes, as pieces whose tokens concatenate (see the
    module docstring: tools JSON, then ``<|role|>`` and content per message)."""
    if "messages" not in body:
        prompt = body.get("prompt", "")
        return [prompt if isinstance(prompt, str) else " ".join(map(str, prompt))]
    parts = [orjson.dumps(body["tools"]).decode()] if body.get("tools") else []
    for m in body.get("messages") or []:
        content = m.get("content")
        parts += [f"<|{m.get('role')}|>", content if isinstance(content, str) else orjson.dumps(content).decode()]
    return parts


@lru_cache(maxsize=4096)
def tokenize(text: str) -> tuple[str, ...]:
    """Tokens of ``text`` (cached: the replica's CPU time is not what is being modelled)."""
    return tuple(_TOKEN.findall(text))


def prompt_tokens(body: dict) -> list[str]:
    return [t for part in render_parts(body) for t in tokenize(part)]


def block_hashes(tokens: list[str], block_tokens: int) -> list[int]:
    """Chained hashes of the full blocks of ``tokens``."""
    out, parent = [], b""
    for i in range(0, len(tokens) - block_tokens + 1, block_tokens):
        digest = hashlib.blake2b(parent + "\x00".join(tokens[i:i + block_tokens]).encode(), digest_size=8).digest()
        out.append(int.from_bytes(digest, "big"))
        parent = digest
    return out


class FakeVllmReplica:
    """One fake replica; :attr:`app` is its ASGI app.

    Args:
        name: the ``model_name`` label of its metrics and the ``model`` it answers as.
        model: timing and cache parameters.
        index: this replica's bit in ``ledger`` (0-62).
        ledger: block hash -> bit mask of the replicas that ever cached it, shared by the
            replicas of one pool, for the miss causes (``state.misses``).
    """

    def __init__(self, name: str = "fake-vllm", model: ReplicaModel | None = None, *, index: int = 0,
                 ledger: dict[int, int] | None = None):
        self.name = name
        self.state = ReplicaState(model or ReplicaModel(), index=index,
                                  ledger=ledger if ledger is not None else {})
        self._slots: asyncio.Semaphore | None = None
        self._prefill: asyncio.Lock | None = None
        self.app = Starlette(routes=[
            Route("/v1/chat/completions", self._complete, methods=["POST"]),
            Route("/v1/completions", self._complete, methods=["POST"]),
            Route("/v1/models", self._models, methods=["GET"]),
            Route("/metrics", self._metrics, methods=["GET"]),
            Route("/health", lambda request: Response(status_code=200), methods=["GET"]),
        ])

    def _sync(self) -> tuple[asyncio.Semaphore, asyncio.Lock]:
        # created lazily: they must belong to the serving event loop
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.state.model.max_num_seqs)
            self._prefill = asyncio.Lock()
        return self._slots, self._prefill

    async def _models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": self.name, "object": "model"}]})

    async def _complete(self, request: Request) -> Response:
        arrived = time.perf_counter()
        body = orjson.loads(await request.body())
        chat = request.url.path.endswith("/chat/completions")
        tokens = prompt_tokens(body)
        hashes = block_hashes(tokens, self.state.model.block_tokens)
        n_out = int(body.get("max_tokens") or body.get("max_completion_tokens") or self.state.model.output_tokens)
        slots, prefill = self._sync()
        st, m = self.state, self.state.model
        st.waiting += 1
        queued = True
        try:
            await slots.acquire()
        except BaseException:
            st.waiting -= 1
            raise
        st.running += 1
        try:
            async with prefill:
                st.waiting -= 1
                queued = False
                cached_blocks = st.lookup(hashes)
                cached = cached_blocks * m.block_tokens
                st.classify_misses(hashes, cached_blocks, len(tokens))
                await asyncio.sleep(m.prefill_base_s + (len(tokens) - cached) * m.prefill_s_per_token)
                st.insert(hashes)
            st.queries += len(tokens)
            st.hits += cached
            st.observe_ttft(time.perf_counter() - arrived)
        except BaseException:
            st.waiting -= int(queued)
            st.running -= 1
            slots.release()
            raise
        usage = {"prompt_tokens": len(tokens), "completion_tokens": n_out, "total_tokens": len(tokens) + n_out,
                 "prompt_tokens_details": {"cached_tokens": cached}}
        if body.get("stream"):
            return StreamingResponse(self._stream(chat, n_out, usage, slots), media_type="text/event-stream")
        try:
            await asyncio.sleep(m.itl_s * max(0, n_out - 1))
        finally:
            st.running -= 1
            st.requests += 1
            slots.release()
        text = " ".join(f"tok{i}" for i in range(n_out))
        choice = ({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"} if chat
                  else {"index": 0, "text": text, "finish_reason": "length"})
        return JSONResponse({"id": f"cmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion" if chat
                             else "text_completion", "created": int(time.time()), "model": self.name,
                             "choices": [choice], "usage": usage})

    async def _stream(self, chat: bool, n_out: int, usage: dict, slots: asyncio.Semaphore):
        cid, st = f"chatcmpl-{uuid.uuid4().hex[:12]}", self.state
        obj = "chat.completion.chunk" if chat else "text_completion"
        try:
            for i in range(n_out):
                if i:
                    await asyncio.sleep(st.model.itl_s)
                piece = f"tok{i}" if i == 0 else f" tok{i}"
                last = i == n_out - 1
                choice = ({"index": 0, "delta": {"content": piece}, "finish_reason": "length" if last else None}
                          if chat else {"index": 0, "text": piece, "finish_reason": "length" if last else None})
                yield b"data: " + orjson.dumps({"id": cid, "object": obj, "created": int(time.time()),
                                                "model": self.name, "choices": [choice]}) + b"\n\n"
            yield b"data: " + orjson.dumps({"id": cid, "object": obj, "created": int(time.time()), "model": self.name,
                                            "choices": [], "usage": usage}) + b"\n\n"
            yield b"data: [DONE]\n\n"
        finally:
            st.running -= 1
            st.requests += 1
            slots.release()

    async def _metrics(self, request: Request) -> Response:
        return PlainTextResponse(self.metrics_text(), media_type="text/plain; version=0.0.4")

    def metrics_text(self) -> str:
        """The ``/metrics`` body (Prometheus text exposition format)."""
        st, label = self.state, f'{{model_name="{self.name}"}}'
        lines = []
        for name, kind, value in (
            ("vllm:num_requests_running", "gauge", st.running),
            ("vllm:num_requests_waiting", "gauge", st.waiting),
            ("vllm:kv_cache_usage_perc", "gauge", len(st.cache) / st.model.capacity_blocks),
            ("vllm:prefix_cache_queries_total", "counter", st.queries),
            ("vllm:prefix_cache_hits_total", "counter", st.hits),
            ("vllm:request_success_total", "counter", st.requests),
        ):
            lines += [f"# TYPE {name} {kind}", f"{name}{label} {float(value)}"]
        # vLLM's info gauge of its cache configuration (value 1; the facts are labels).
        lines += ["# TYPE vllm:cache_config_info gauge",
                  f'vllm:cache_config_info{{block_size="{st.model.block_tokens}",enable_prefix_caching="True",'
                  f'num_gpu_blocks="{st.model.capacity_blocks}"}} 1.0']
        lines.append("# TYPE vllm:time_to_first_token_seconds histogram")
        for le, count in zip(TTFT_BUCKETS, st.ttft_buckets):
            lines.append(f'vllm:time_to_first_token_seconds_bucket{{le="{le}",model_name="{self.name}"}} {float(count)}')
        count = st.ttft_count
        lines.append(f'vllm:time_to_first_token_seconds_bucket{{le="+Inf",model_name="{self.name}"}} {float(count)}')
        lines.append(f"vllm:time_to_first_token_seconds_sum{label} {st.ttft_sum}")
        lines.append(f"vllm:time_to_first_token_seconds_count{label} {float(count)}")
        return "\n".join(lines) + "\n"


@dataclass
class ReplicaServers:
    """Fake replicas served on loopback by uvicorn in one background thread."""

    replicas: list[FakeVllmReplica]
    urls: list[str]
    servers: list[uvicorn.Server]
    thread: threading.Thread

    def stop(self) -> None:
        for s in self.servers:
            s.should_exit = True
        self.thread.join(timeout=10)

    def reset(self) -> None:
        for r in self.replicas:
            r.state.reset()


def serve_replicas(n: int, model: ReplicaModel | None = None, name: str = "fake-vllm") -> ReplicaServers:
    """Start ``n`` fake replicas on free loopback ports; ``urls`` are their ``.../v1`` bases.

    Raises:
        RuntimeError: they did not start within 10 s.
    """
    ledger: dict[int, int] = {}  # block hash -> bit mask of the replicas that ever cached it
    replicas = [FakeVllmReplica(name, model, index=i, ledger=ledger) for i in range(n)]
    socks, servers = [], []
    for r in replicas:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        socks.append(sock)
        servers.append(uvicorn.Server(uvicorn.Config(r.app, lifespan="off", log_level="critical", access_log=False,
                                                     timeout_graceful_shutdown=1)))

    async def serve_all() -> None:
        await asyncio.gather(*(s.serve(sockets=[sock]) for s, sock in zip(servers, socks)))

    thread = threading.Thread(target=lambda: asyncio.run(serve_all()), daemon=True, name="fake-vllm")
    thread.start()
    deadline = time.monotonic() + 10
    while not all(s.started for s in servers):
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("fake vLLM replicas did not start")
        time.sleep(0.01)
    urls = [f"http://127.0.0.1:{sock.getsockname()[1]}/v1" for sock in socks]
    return ReplicaServers(replicas, urls, servers, thread)
