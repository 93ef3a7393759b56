"""Redis limiter: one Lua script admits (rpm, tpm and budget checked and counted in one
atomic step, so every gateway replica sees the same counters) and one settles.

Keys (``{p}`` = ``mixroute``): ``{p}:w:<subject>:<window>`` hash ``r`` (requests), ``t``
(tokens), expiring after two windows; ``{p}:s:<subject>:<period id>`` hash ``spent`` and
``reserved`` in nano-USD, and ``seeded`` once reconciled with the store;
``{p}:z:<subject>:<period id>`` sorted set of the open reservations (member
``<id>:<nano-USD>``, score: when it expires, unix ms); ``{p}:epoch``, bumped by a replica
that reached Redis again after losing it, so that every replica reconciles.

Losing Redis (docs/LIMITS.md). A counter without ``seeded`` (Redis restarted empty) is
reconciled with the store before it admits anything. A call that fails marks the limiter
stale: its next request pings Redis, reconciles every budget again (spend admitted
fail-open meanwhile is in the store), and retries the settlements and releases that
failed. Settling removes the reservation's member first, so a retried settlement (or one
whose reservation expired or was lost in a restart) counts once or not at all.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import deque

from gateway.limits.base import (NANO, RESERVATION_TTL_S, BudgetExceeded, Limiter, LimiterUnavailable, Limits,
                                 RateLimitExceeded, Reservation, period_id, period_retry_after, ratelimit_headers,
                                 to_nano, window_now)

log = logging.getLogger("mixroute.limits")

# Returns {verdict, window requests, window tokens, spent, epoch}: verdict 0 admitted (counts
# include this request), 1 rpm reached, 2 tpm reached, 3 budget spent, 4 the budget's
# counter was never reconciled with the store (a new period, or Redis restarted empty).
_ADMIT = """
local epoch = redis.call('GET', KEYS[4]) or '0'
local budget = tonumber(ARGV[3])
if budget >= 0 and redis.call('HEXISTS', KEYS[2], 'seeded') == 0 then return {4, 0, 0, 0, epoch} end
local r = tonumber(redis.call('HGET', KEYS[1], 'r') or '0')
local t = tonumber(redis.call('HGET', KEYS[1], 't') or '0')
if tonumber(ARGV[1]) >= 0 and r >= tonumber(ARGV[1]) then return {1, r, t, 0, epoch} end
if tonumber(ARGV[2]) >= 0 and t >= tonumber(ARGV[2]) then return {2, r, t, 0, epoch} end
local now = tonumber(ARGV[7])
local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
if #gone > 0 then
  local sum = 0
  for _, m in ipairs(gone) do sum = sum + tonumber(string.match(m, ':(%d+)$')) end
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  redis.call('HINCRBY', KEYS[2], 'reserved', string.format('%d', -sum))
end
local spent = tonumber(redis.call('HGET', KEYS[2], 'spent') or '0')
local reserved = tonumber(redis.call('HGET', KEYS[2], 'reserved') or '0')
if budget >= 0 and spent + reserved >= budget then return {3, r, t, string.format('%d', spent), epoch} end
r = redis.call('HINCRBY', KEYS[1], 'r', 1)
t = redis.call('HINCRBY', KEYS[1], 't', ARGV[4])
redis.call('EXPIRE', KEYS[1], 120)
redis.call('HINCRBY', KEYS[2], 'reserved', ARGV[5])
redis.call('ZADD', KEYS[3], ARGV[9], ARGV[8])
if tonumber(ARGV[6]) > 0 then
  redis.call('EXPIRE', KEYS[2], ARGV[6])
  redis.call('EXPIRE', KEYS[3], ARGV[6])
end
return {0, r, t, 0, epoch}
"""

# Idempotent: only the call that removes the reservation's member counts.
_SETTLE = """
if redis.call('ZREM', KEYS[3], ARGV[4]) == 0 then return 0 end
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HINCRBY', KEYS[1], 't', ARGV[1]) end
redis.call('HINCRBY', KEYS[2], 'reserved', ARGV[2])
redis.call('HINCRBY', KEYS[2], 'spent', ARGV[3])
return 1
"""

# The larger of the counter and the store's figure, then marked reconciled.
_SEED = """
local spent = tonumber(redis.call('HGET', KEYS[1], 'spent') or '0')
if tonumber(ARGV[1]) > spent then redis.call('HSET', KEYS[1], 'spent', ARGV[1]) end
redis.call('HSET', KEYS[1], 'seeded', 1)
if tonumber(ARGV[2]) > 0 then redis.call('EXPIRE', KEYS[1], ARGV[2]) end
return 1
"""

_PERIOD_TTL_S = {"day": 3 * 86400, "month": 70 * 86400, "total": 0}
_PENDING_MAX = 10_000  # settlements kept for retry while Redis is unreachable (oldest dropped)
RECOVER_EVERY_S = 1.0  # while Redis is unreachable, how often the limiter tries it again (seconds)


class RedisLimiter(Limiter):
    """Limiter on a Redis server.

    Args:
        url: ``redis://host:port/db``.
        prefix: key prefix (tests use their own).
        timeout_s: socket connect/read timeout: a Redis slower than this counts as
            unavailable (seconds; it includes the event loop's own delay in reading the
            answer, setting ``MIXROUTE_REDIS_TIMEOUT_S``).
        pool_wait_s: longest wait for a free pooled connection during a burst (seconds);
            waiting for a connection is queueing in this process, not Redis being down.
        max_connections: pooled connections per gateway process.
        reservation_ttl_s: how long an unsettled reservation holds budget (seconds).
    """

    def __init__(self, url: str, *, prefix: str = "mixroute", timeout_s: float = 3.0, pool_wait_s: float = 10.0,
                 max_connections: int = 64, reservation_ttl_s: float = RESERVATION_TTL_S):
        import redis.asyncio as aioredis

        super().__init__()
        self.prefix = prefix
        self.reservation_ttl_s = reservation_ttl_s
        # A blocking pool: a burst waits for a free connection instead of failing.
        pool = aioredis.BlockingConnectionPool.from_url(url, max_connections=max_connections, timeout=pool_wait_s,
                                                       socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
        self._redis = aioredis.Redis(connection_pool=pool)
        self._admit = self._redis.register_script(_ADMIT)
        self._settle = self._redis.register_script(_SETTLE)
        self._seed_script = self._redis.register_script(_SEED)
        self._stale = False  # a call failed: reconcile and retry the pending settlements first
        self._epoch: bytes | None = None  # the last {p}:epoch seen
        self._pending: deque[tuple[list[str], list]] = deque(maxlen=_PENDING_MAX)
        self._recovering = asyncio.Lock()
        self._watch: asyncio.Task | None = None

    def _keys(self, subject: str, window: int, pid: str) -> list[str]:
        p = self.prefix
        return [f"{p}:w:{subject}:{window}", f"{p}:s:{subject}:{pid}", f"{p}:z:{subject}:{pid}", f"{p}:epoch"]

    async def _call(self, script, keys, args):
        from redis.exceptions import ConnectionError as RedisConnectionError
        from redis.exceptions import RedisError

        for attempt in range(2):
            try:
                return await script(keys=keys, args=args)
            except RedisConnectionError:
                # A pooled connection broken by a Redis restart is not an outage: try a new one once.
                if attempt == 0:
                    continue
                exc_name = "ConnectionError"
            except (RedisError, OSError) as exc:
                exc_name = type(exc).__name__
            self._unreachable()
            raise LimiterUnavailable(f"redis: {exc_name}") from None

    def _unreachable(self) -> None:
        """Mark the limiter stale, and keep trying to recover in the background, so that
        failed settlements are retried and budgets reconciled even without new requests."""
        self._stale = True
        if self._watch is None or self._watch.done():
            self._watch = asyncio.get_running_loop().create_task(self._recover_soon(), name="mixroute-redis-recover")

    async def _recover_soon(self) -> None:
        while self._stale:
            await asyncio.sleep(RECOVER_EVERY_S)
            try:
                await self._recover()
            except LimiterUnavailable:
                pass

    async def _recover(self) -> None:
        """After a failed call: once Redis answers, reconcile every budget at its next request,
        tell the other replicas to (``{p}:epoch``), and retry the failed settlements.

        Raises:
            LimiterUnavailable: Redis still does not answer.
        """
        if not self._stale:
            return
        from redis.exceptions import RedisError

        async with self._recovering:
            if not self._stale:
                return
            try:
                await self._redis.ping()
                self._epoch = str(await self._redis.incr(f"{self.prefix}:epoch")).encode()
            except (RedisError, OSError) as exc:
                raise LimiterUnavailable(f"redis: {type(exc).__name__}") from None
            self._stale = False  # before the retries: one that fails marks it stale again
            self.forget_seeds()
            retried = 0
            while self._pending:
                keys, args = self._pending[0]
                await self._call(self._settle, keys, args)  # stale again on failure: kept for the next try
                self._pending.popleft()
                retried += 1
            log.warning("redis %s reachable again: budgets are reconciled with the store, %d settlement(s) retried",
                        self.where, retried)

    async def seed_budget(self, limits: Limits) -> None:
        await self._recover()
        await super().seed_budget(limits)

    async def admit(self, limits: Limits, tokens: int, cost_usd: float) -> Reservation:
        await self._recover()
        for _ in range(2):
            reservation = await self._try_admit(limits, tokens, cost_usd)
            if reservation is not None:
                return reservation
            await self.reconcile(limits)  # a new or lost counter: start it from the store
        raise LimiterUnavailable("redis: the budget counter could not be reconciled")

    async def _try_admit(self, limits: Limits, tokens: int, cost_usd: float) -> Reservation | None:
        window, left = window_now()
        pid = period_id(limits.period)
        cost = to_nano(cost_usd)
        budget = to_nano(limits.budget_usd) if limits.budget_usd is not None else -1
        member = f"{uuid.uuid4().hex[:16]}:{cost}"
        now_ms = int(time.time() * 1000)
        keys = self._keys(limits.subject, window, pid)
        args = [limits.rpm if limits.rpm is not None else -1, limits.tpm if limits.tpm is not None else -1,
                budget, tokens, cost, _PERIOD_TTL_S.get(limits.period, 0), now_ms, member,
                now_ms + int(self.reservation_ttl_s * 1000)]
        try:
            verdict, requests, window_tokens, spent, epoch = await self._call(self._admit, keys, args)
        except LimiterUnavailable:
            # Redis may have run the script after the client gave up (a hang): release the
            # reservation once it answers again, or it holds budget until it expires.
            self._pending.append((keys, [-tokens, -cost, 0, member]))
            raise
        if self._epoch is not None and epoch != self._epoch:
            self.forget_seeds()  # another replica lost Redis for a while: reconcile from the store
        self._epoch = epoch
        if verdict == 4:
            return None
        if verdict in (1, 2):
            what = f"{limits.rpm} requests" if verdict == 1 else f"{limits.tpm} tokens"
            raise RateLimitExceeded(f"Rate limit reached: {what} per minute", retry_after_s=left,
                                    headers=ratelimit_headers(limits, int(requests), int(window_tokens), left))
        if verdict == 3:
            raise BudgetExceeded(
                f"Budget of {limits.budget_usd:.6f} USD {limits.per_period} is spent "
                f"({int(spent) / NANO:.6f} USD used)",
                retry_after_s=period_retry_after(limits.period))
        return Reservation(limits, window, pid, tokens, cost, int(requests), int(window_tokens), left,
                           member=member)

    async def _seed(self, limits: Limits, pid: str, spent_usd: float) -> None:
        """Raise ``spent`` to the store's figure (never lower it: the store lags settlements),
        mark the counter reconciled; a new one expires as the admit script's do."""
        key = self._keys(limits.subject, 0, pid)[1]
        await self._call(self._seed_script, [key], [to_nano(spent_usd), _PERIOD_TTL_S.get(limits.period, 0)])

    async def settle(self, reservation: Reservation, tokens: int, cost_usd: float) -> None:
        keys = self._keys(reservation.limits.subject, reservation.window, reservation.period_id)
        args = [tokens - reservation.tokens, -reservation.cost_nano, to_nano(cost_usd), reservation.member]
        try:
            await self._call(self._settle, keys, args)
        except LimiterUnavailable:
            self._pending.append((keys, args))  # retried when Redis answers again
            raise

    async def spent_usd(self, limits: Limits) -> float:
        from redis.exceptions import RedisError

        key = self._keys(limits.subject, 0, period_id(limits.period))[1]
        try:
            value = await self._redis.hget(key, "spent")
        except (RedisError, OSError) as exc:
            raise LimiterUnavailable(f"redis: {type(exc).__name__}") from None
        return int(value or 0) / NANO

    async def check(self) -> str | None:
        """Ping Redis once: ``None`` when it answers, else why not (never raises; the
        limiter fails open while Redis is down, docs/LIMITS.md)."""
        from redis.exceptions import RedisError

        try:
            await self._redis.ping()
            return None
        except (RedisError, OSError) as exc:
            return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"

    @property
    def where(self) -> str:
        """``host:port/db`` (or the socket path) of the Redis server, without credentials."""
        kw = self._redis.connection_pool.connection_kwargs
        if kw.get("path"):
            return str(kw["path"])
        return f"{kw.get('host', '?')}:{kw.get('port', '?')}/{kw.get('db', 0)}"

    async def aclose(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
        await self._redis.aclose()
