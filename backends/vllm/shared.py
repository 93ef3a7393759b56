"""Pool state shared by gateway replicas through Redis, off the request path.

Two things are shared per pool (``<prefix>:pool:<backend>``):

- **In-flight counts.** Every ``interval_s`` each gateway writes its own in-flight count
  per replica into the hash ``...:inflight:<gateway id>`` (expiring after 5 intervals) and
  registers itself in the sorted set ``...:gateways`` (score: time of the write); it then
  reads the other live gateways' hashes and sets :attr:`Replica.remote_in_flight`, which
  the choosers add to their own counts. Others' counts are at most about one interval old.
- **The prefix-affinity table.** After each choice the affinity chooser's block hashes and
  the chosen replica are published on ``...:affinity``; every other gateway learns them
  into its own table (:meth:`backends.vllm.affinity.AffinityChooser.learn`), so a session
  that lands on another gateway replica still follows its prefix.

Replicas are named in Redis by :func:`replica_key`, a digest of their base URL, never by
the URL itself: a replica URL may carry credentials (``http://user:secret@host/v1``), and
Redis is readable by every service that shares it.

No Redis call runs on the request path: publishing happens in a background task fed by a
bounded queue (a full queue drops the update and counts it), and a Redis outage only
degrades choice to this gateway's own view. Without Redis none of this runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time

import orjson

log = logging.getLogger("mixroute.pool.shared")


def replica_key(base_url: str) -> str:
    """The name of a replica in Redis: the first 16 hex digits of the SHA-256 of its base
    URL (its credentials, if any, stay in this process)."""
    return hashlib.sha256(base_url.encode()).hexdigest()[:16]


class SharedPoolState:
    """Shares one pool's in-flight counts and affinity choices; see module docstring.

    Args:
        url: Redis URL. prefix: key prefix. pool: the backend name.
        gateway_id: this gateway process's unique id.
        interval_s: in-flight sync period (seconds).
    """

    def __init__(self, url: str, prefix: str, pool: str, gateway_id: str, interval_s: float = 0.25):
        import redis.asyncio as aioredis

        self._redis = aioredis.Redis.from_url(url, socket_timeout=1.0, socket_connect_timeout=1.0)
        self.base = f"{prefix}:pool:{pool}"
        self.gateway_id = gateway_id
        self.interval_s = interval_s
        self._outbox: asyncio.Queue[bytes] = asyncio.Queue(maxsize=10_000)
        self._tasks: list[asyncio.Task] = []
        self._key_of: dict[str, str] = {}  # replica base URL -> replica_key(), set by start()
        self.dropped = 0

    def start(self, pool, chooser) -> None:
        """Start syncing ``pool`` (a :class:`backends.vllm.pool.Pool`) and, when it is an
        affinity chooser, sharing its choices."""
        loop = asyncio.get_running_loop()
        self._key_of = {r.base_url: replica_key(r.base_url) for r in pool.replicas}  # a pool's replicas are fixed
        self._tasks.append(loop.create_task(self._sync_in_flight(pool)))
        if hasattr(chooser, "learn"):
            chooser.on_choice = self._share_choice
            self._tasks.append(loop.create_task(self._publish()))
            self._tasks.append(loop.create_task(self._listen(chooser)))

    def _share_choice(self, hashes, url: str) -> None:
        try:
            self._outbox.put_nowait(orjson.dumps({"g": self.gateway_id, "r": self._key_of.get(url) or replica_key(url),
                                                "h": list(hashes)}))
        except asyncio.QueueFull:
            self.dropped += 1

    async def _publish(self) -> None:
        channel = f"{self.base}:affinity"
        while True:
            message = await self._outbox.get()
            try:
                await self._redis.publish(channel, message)
            except Exception as exc:  # Redis down: this gateway keeps its own table
                self.dropped += 1
                log.debug("affinity publish failed: %s", exc)

    async def _listen(self, chooser) -> None:
        url_of = {key: url for url, key in self._key_of.items()}
        while True:
            pubsub = self._redis.pubsub()
            try:
                await pubsub.subscribe(f"{self.base}:affinity")
                async for message in pubsub.listen():
                    if message.get("type") != "message":
                        continue
                    data = orjson.loads(message["data"])
                    # A replica this gateway's pool does not list (another configuration) is not learned.
                    url = url_of.get(data.get("r"))
                    if data.get("g") != self.gateway_id and url is not None:
                        chooser.learn(data["h"], url)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("affinity listener: %s; retrying in 1 s", exc)
                await asyncio.sleep(1.0)
            finally:
                with contextlib.suppress(Exception):
                    await asyncio.shield(pubsub.aclose())

    async def _sync_in_flight(self, pool) -> None:
        gateways, mine = f"{self.base}:gateways", f"{self.base}:inflight:{self.gateway_id}"
        ttl_ms = max(1, int(self.interval_s * 5 * 1000))
        while True:
            try:
                now = time.time()
                async with self._redis.pipeline(transaction=False) as pipe:
                    pipe.hset(mine, mapping={self._key_of[r.base_url]: r.in_flight for r in pool.replicas})
                    pipe.pexpire(mine, ttl_ms)
                    pipe.zadd(gateways, {self.gateway_id: now})
                    pipe.zremrangebyscore(gateways, 0, now - 5 * self.interval_s)
                    pipe.zrange(gateways, 0, -1)
                    *_, members = await pipe.execute()
                others = [m.decode() for m in members if m.decode() != self.gateway_id]
                totals: dict[str, int] = {}
                if others:
                    async with self._redis.pipeline(transaction=False) as pipe:
                        for g in others:
                            pipe.hgetall(f"{self.base}:inflight:{g}")
                        for counts in await pipe.execute():
                            for key, n in counts.items():
                                totals[key.decode()] = totals.get(key.decode(), 0) + int(n)
                for r in pool.replicas:
                    r.remote_in_flight = totals.get(self._key_of[r.base_url], 0)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis down: fall back to this gateway's own counts
                for r in pool.replicas:
                    r.remote_in_flight = 0
                log.debug("in-flight sync failed: %s", exc)
            await asyncio.sleep(self.interval_s)

    async def aclose(self) -> None:
        for task in self._tasks:
            task.cancel()
        # Every wait here is bounded: a CI run once hung for minutes in this teardown (in
        # redis-py, cancelled mid-read or waiting on a reply); closing the client ends such reads.
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=2.0)
        try:
            await asyncio.wait_for(self._redis.delete(f"{self.base}:inflight:{self.gateway_id}"), 2.0)
            await asyncio.wait_for(self._redis.zrem(f"{self.base}:gateways", self.gateway_id), 2.0)
        except Exception:  # best effort: the entries expire anyway
            pass
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._redis.aclose(), 2.0)
