"""Redis limiter: one Lua script admits (rpm, tpm and budget checked and counted in one
atomic step, so every gateway replica sees the same counters) and one settles.

Keys (``{p}`` = ``mixroute``): ``{p}:w:<subject>:<window>`` hash ``r`` (requests), ``t``
(tokens), expiring after two windows; ``{p}:s:<subject>:<period id>`` hash ``spent`` and
``reserved`` in nano-USD.
"""

from __future__ import annotations

from gateway.limits.base import (NANO, BudgetExceeded, Limiter, LimiterUnavailable, Limits, RateLimitExceeded,
                                 Reservation, period_id, period_retry_after, ratelimit_headers, to_nano,
                                 window_now)

# Returns {verdict, window requests, window tokens, spent}: verdict 0 admitted (counts
# include this request), 1 rpm reached, 2 tpm reached, 3 budget spent.
_ADMIT = """
local r = tonumber(redis.call('HGET', KEYS[1], 'r') or '0')
local t = tonumber(redis.call('HGET', KEYS[1], 't') or '0')
if tonumber(ARGV[1]) >= 0 and r >= tonumber(ARGV[1]) then return {1, r, t, 0} end
if tonumber(ARGV[2]) >= 0 and t >= tonumber(ARGV[2]) then return {2, r, t, 0} end
local spent = tonumber(redis.call('HGET', KEYS[2], 'spent') or '0')
local reserved = tonumber(redis.call('HGET', KEYS[2], 'reserved') or '0')
if tonumber(ARGV[3]) >= 0 and spent + reserved >= tonumber(ARGV[3]) then return {3, r, t, spent} end
r = redis.call('HINCRBY', KEYS[1], 'r', 1)
t = redis.call('HINCRBY', KEYS[1], 't', ARGV[4])
redis.call('EXPIRE', KEYS[1], 120)
redis.call('HINCRBY', KEYS[2], 'reserved', ARGV[5])
if tonumber(ARGV[6]) > 0 then redis.call('EXPIRE', KEYS[2], ARGV[6]) end
return {0, r, t, 0}
"""

_SETTLE = """
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HINCRBY', KEYS[1], 't', ARGV[1]) end
redis.call('HINCRBY', KEYS[2], 'reserved', ARGV[2])
redis.call('HINCRBY', KEYS[2], 'spent', ARGV[3])
return 1
"""

_PERIOD_TTL_S = {"day": 3 * 86400, "month": 70 * 86400, "total": 0}


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
    """

    def __init__(self, url: str, *, prefix: str = "mixroute", timeout_s: float = 3.0, pool_wait_s: float = 10.0,
                 max_connections: int = 64):
        import redis.asyncio as aioredis

        super().__init__()
        self.prefix = prefix
        # A blocking pool: a burst waits for a free connection instead of failing.
        pool = aioredis.BlockingConnectionPool.from_url(url, max_connections=max_connections, timeout=pool_wait_s,
                                                       socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
        self._redis = aioredis.Redis(connection_pool=pool)
        self._admit = self._redis.register_script(_ADMIT)
        self._settle = self._redis.register_script(_SETTLE)

    def _keys(self, subject: str, window: int, pid: str) -> list[str]:
        return [f"{self.prefix}:w:{subject}:{window}", f"{self.prefix}:s:{subject}:{pid}"]

    async def _call(self, script, keys, args):
        from redis.exceptions import RedisError

        try:
            return await script(keys=keys, args=args)
        except (RedisError, OSError) as exc:
            raise LimiterUnavailable(f"redis: {type(exc).__name__}") from None

    async def admit(self, limits: Limits, tokens: int, cost_usd: float) -> Reservation:
        window, left = window_now()
        pid = period_id(limits.period)
        cost = to_nano(cost_usd)
        budget = to_nano(limits.budget_usd) if limits.budget_usd is not None else -1
        args = [limits.rpm if limits.rpm is not None else -1, limits.tpm if limits.tpm is not None else -1,
                budget, tokens, cost, _PERIOD_TTL_S.get(limits.period, 0)]
        verdict, requests, window_tokens, spent = await self._call(
            self._admit, self._keys(limits.subject, window, pid), args)
        if verdict in (1, 2):
            what = f"{limits.rpm} requests" if verdict == 1 else f"{limits.tpm} tokens"
            raise RateLimitExceeded(f"Rate limit reached: {what} per minute", retry_after_s=left,
                                    headers=ratelimit_headers(limits, int(requests), int(window_tokens), left))
        if verdict == 3:
            raise BudgetExceeded(
                f"Budget of {limits.budget_usd:.6f} USD {limits.per_period} is spent "
                f"({int(spent) / NANO:.6f} USD used)",
                retry_after_s=period_retry_after(limits.period))
        return Reservation(limits, window, pid, tokens, cost, int(requests), int(window_tokens), left)

    async def _seed(self, limits: Limits, pid: str, spent_usd: float) -> None:
        """``HSETNX spent``: a counter another gateway (or this period's traffic) already
        started is left as it is; a new one expires as the admit script's do."""
        from redis.exceptions import RedisError

        key = self._keys(limits.subject, 0, pid)[1]
        try:
            if await self._redis.hsetnx(key, "spent", to_nano(spent_usd)) and _PERIOD_TTL_S.get(limits.period, 0):
                await self._redis.expire(key, _PERIOD_TTL_S[limits.period])
        except (RedisError, OSError) as exc:
            raise LimiterUnavailable(f"redis: {type(exc).__name__}") from None

    async def settle(self, reservation: Reservation, tokens: int, cost_usd: float) -> None:
        keys = self._keys(reservation.limits.subject, reservation.window, reservation.period_id)
        await self._call(self._settle, keys, [tokens - reservation.tokens, -reservation.cost_nano, to_nano(cost_usd)])

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
        await self._redis.aclose()
