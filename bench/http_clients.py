"""CPU cost of one upstream call by HTTP client, side by side in one run.

Run: ``python -m bench.http_clients [--n 3000]``

Sequential POSTs to the fixed nginx upstream (:mod:`bench.upstream`), each response parsed
with orjson; prints the median over 3 rounds of process CPU time per request (microseconds)
for plain ``httpx.AsyncClient``, raw ``aiohttp`` and the vllm backend's own ``send``
(:class:`backends.vllm.backend.VllmBackend`: aiohttp plus replica choice, body encoding
and error handling), under uvloop.
"""

from __future__ import annotations

import argparse
import statistics
import time

import orjson

from bench.upstream import NginxUpstream

BODY = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
HEADERS = {"content-type": "application/json"}


async def _httpx(url: str, n: int, transport=None) -> float:
    import httpx

    async with httpx.AsyncClient(transport=transport) as client:
        for _ in range(100):
            await client.post(url, content=BODY, headers=HEADERS)
        t0 = time.process_time()
        for _ in range(n):
            orjson.loads((await client.post(url, content=BODY, headers=HEADERS)).content)
        return (time.process_time() - t0) / n * 1e6


async def _aiohttp(url: str, n: int) -> float:
    import aiohttp

    async with aiohttp.ClientSession() as session:
        for _ in range(100):
            async with session.post(url, data=BODY, headers=HEADERS) as r:
                await r.read()
        t0 = time.process_time()
        for _ in range(n):
            async with session.post(url, data=BODY, headers=HEADERS) as r:
                orjson.loads(await r.read())
        return (time.process_time() - t0) / n * 1e6


async def _backend(url: str, n: int) -> float:
    """The vllm backend's own ``send`` (replica choice, body encoding, error handling
    included), i.e. what the gateway's pass-through path pays per upstream call."""
    from backends.config import BackendConfig
    from backends.vllm.backend import VllmBackend

    base = url.removesuffix("/chat/completions")
    backend = VllmBackend(BackendConfig(name="bench", kind="vllm", model="m", endpoints=[base],
                                        options={"metrics_interval_s": 0}))
    body = orjson.loads(BODY)
    try:
        for _ in range(100):
            await backend.send("chat", body)
        t0 = time.process_time()
        for _ in range(n):
            await backend.send("chat", body)
        return (time.process_time() - t0) / n * 1e6
    finally:
        await backend.aclose()


def main() -> None:
    import uvloop

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=3000)
    args = parser.parse_args()
    upstream = NginxUpstream(_free_port()).start()
    url = upstream.url + "/chat/completions"
    try:
        results: dict[str, list[float]] = {"httpx": [], "aiohttp": [], "VllmBackend.send": []}
        for _ in range(3):
            results["httpx"].append(uvloop.run(_httpx(url, args.n)))
            results["aiohttp"].append(uvloop.run(_aiohttp(url, args.n)))
            results["VllmBackend.send"].append(uvloop.run(_backend(url, args.n)))
    finally:
        upstream.stop()
    base = statistics.median(results["httpx"])
    for name, values in results.items():
        med = statistics.median(values)
        print(f"{name:24s} {med:7.0f} us CPU/request  ({med / base:.2f}x httpx)")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    main()
