"""Policy-version broadcast between gateway replicas over Redis pub/sub.

When a replica applies a policy (hash H) it publishes H on ``<prefix>:policy``. Every
other replica that hears a hash different from its own re-reads its policy file (all
replicas mount the same file, e.g. one Kubernetes ConfigMap), so a file-watch event that
reached one replica first makes all of them switch. A replica whose file still has the
old content keeps its policy and logs the mismatch: the broadcast never carries policy
text, so a replica can only apply a policy it can read and validate itself.
"""

from __future__ import annotations

import asyncio
import logging

log = logging.getLogger("mixroute.broadcast")


class PolicyBroadcast:
    """Publish applied policy hashes and reload on others' announcements.

    While Redis cannot be reached the listener retries with exponential backoff (from
    ``retry_s`` doubling up to ``max_retry_s`` seconds) and logs one WARNING per outage,
    then one INFO line when it is subscribed again (replicas still converge through their
    own file watchers meanwhile).

    Args:
        url: Redis URL. prefix: key/channel prefix.
        holder: the :class:`gateway.runtime.PolicyHolder` to reload.
        retry_s, max_retry_s: first and longest wait between reconnection attempts (seconds).
    """

    def __init__(self, url: str, prefix: str, holder, *, retry_s: float = 1.0, max_retry_s: float = 30.0):
        import redis.asyncio as aioredis

        self.channel = f"{prefix}:policy"
        self.holder = holder
        self._redis = aioredis.Redis.from_url(url, socket_connect_timeout=1.0)
        self._task: asyncio.Task | None = None
        self.retry_s, self.max_retry_s = retry_s, max_retry_s
        #: Failed attempts since the listener was last subscribed (0 while it is).
        self.failures = 0

    def announce(self, policy_hash: str) -> None:
        """Publish ``policy_hash`` in the background (failures are logged, never raised)."""
        asyncio.get_running_loop().create_task(self._publish(policy_hash))

    async def _publish(self, policy_hash: str) -> None:
        try:
            await self._redis.publish(self.channel, policy_hash)
        except Exception as exc:  # Redis down: replicas still converge through their file watchers
            log.warning("could not broadcast policy %s: %s", policy_hash, exc)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._listen())

    async def _listen(self) -> None:
        while True:
            pubsub = self._redis.pubsub()
            try:
                await pubsub.subscribe(self.channel)
                if self.failures:
                    log.info("policy broadcast listener: subscribed again after %d failed attempts", self.failures)
                    self.failures = 0
                async for message in pubsub.listen():
                    if message.get("type") != "message":
                        continue
                    await self._on_announce(message["data"])
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                delay = min(self.max_retry_s, self.retry_s * 2 ** min(self.failures, 30))
                if self.failures == 0:
                    log.warning("policy broadcast listener: %s; retrying with backoff up to %g s "
                                "(logged once until it reconnects)", exc, self.max_retry_s)
                else:
                    log.debug("policy broadcast listener: %s; retrying in %.1f s", exc, delay)
                self.failures += 1
                await asyncio.sleep(delay)
            finally:
                try:
                    await pubsub.aclose()
                except Exception:  # the connection is already gone
                    pass

    async def _on_announce(self, data: bytes | str) -> None:
        announced = data.decode() if isinstance(data, bytes) else data
        current = self.holder.current.loaded.hash if self.holder.current else None
        if announced != current:
            log.info("replica announced policy %s (ours %s): reloading", announced, current)
            await self.holder.reload()
            now = self.holder.current.loaded.hash if self.holder.current else None
            if now != announced:
                log.warning("policy file here gives hash %s, not the announced %s", now, announced)

    async def aclose(self) -> None:
        if self._task:
            self._task.cancel()
        await self._redis.aclose()
