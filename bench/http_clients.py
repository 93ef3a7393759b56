"""CPU cost of one upstream call by HTTP client, side by side in one run.

Run: ``python -m bench.http_clients [--n 3000]``

Sequential POSTs to the fixed nginx upstream (:mod:`bench.upstream`), each response parsed
with orjson; prints the median over 3 rounds of process CPU time per request (microseconds)
for plain ``httpx.AsyncClient``, ``httpx.AsyncClient`` over the vLLM pool's transport
(:class:`backends.vllm.transport.PoolTransport`) and raw ``aiohttp``, under uvloop.
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


async def _pool_transport(url: str, n: int) -> float:
    from backends.vllm.transport import PoolTransport

    return await _httpx(url, n, PoolTransport())


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


def main() -> None:
    import uvloop

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=3000)
    args = parser.parse_args()
    upstream = NginxUpstream(_free_port()).start()
    url = upstream.url + "/chat/completions"
    try:
        results: dict[str, list[float]] = {"httpx": [], "httpx + PoolTransport": [], "aiohttp": []}
        for _ in range(3):
            results["httpx"].append(uvloop.run(_httpx(url, args.n)))
            results["httpx + PoolTransport"].append(uvloop.run(_pool_transport(url, args.n)))
            results["aiohttp"].append(uvloop.run(_aiohttp(url, args.n)))
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
