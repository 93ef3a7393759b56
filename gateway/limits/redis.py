"""Redis limiter: one Lua script admits (rpm, tpm and budget checked and counted in one
atomic step, so every gateway replica sees the same counters) and one settles.

Keys (``{p}`` = ``mixroute``): ``{p}:w:<subject>:<window>`` hash ``r`` (requests), ``t``
(tokens), expiring after two windows; ``{p}:s:<subject>:<period id>`` hash ``spent`` and
``reserved`` in nano-USD, ``seeded`` once reconciled with the store, ``gen`` (a random id
given when the counter was built) and ``cut`` (the second its rebuild split time at,
:mod:`gateway.limits.recent`);
``{p}:z:<subject>:<period id>`` sorted set of the open reservations (member
``<id>:<nano-USD>``, score: when it expires, unix ms); ``{p}:epoch``, bumped by a replica
that reached Redis again after losing it, so that every replica reconciles;
``{p}:l:<member>``, a reservation's spend counted after its counter was lost and rebuilt.

Losing Redis (docs/LIMITS.md). A counter without ``seeded`` (Redis restarted empty) is
rebuilt before it admits anything: the store's spend up to a cut :data:`RECENT_S` ago plus
what this process settled since (the store may not have it yet), then each other replica adds
its own part when it first meets the new ``gen``; reservations in flight are held again
(each process its own, ``_open``), and one settled outside its counter adds its spend once. A call that fails marks the limiter
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

from gateway.limits.base import (NANO, RECONCILE_S, RESERVATION_TTL_S, BudgetExceeded, Limiter, LimiterUnavailable,
                                 Limits, RateLimitExceeded, Reservation, period_id, period_retry_after, period_start,
                                 ratelimit_headers, to_nano, window_now)
from gateway.limits.recent import RECENT_S, RecentSpend
from gateway.limits.redis_scripts import ADMIT, CONTRIBUTE, RECONCILE, REHOLD, SETTLE

log = logging.getLogger("mixroute.limits")

_PERIOD_TTL_S = {"day": 3 * 86400, "month": 70 * 86400, "total": 0}
_PENDING_MAX = 10_000  # settlements kept for retry while Redis is unreachable (oldest dropped)
#: Seconds after a rebuilt counter's cut during which other replicas add their recent spend
#: to it (half of RECENT_S after the rebuild; later, the store has it).
_JOIN_S = 1.5 * RECENT_S
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
        self._admit = self._redis.register_script(ADMIT)
        self._settle = self._redis.register_script(SETTLE)
        self._reconcile_script = self._redis.register_script(RECONCILE)
        self._contribute = self._redis.register_script(CONTRIBUTE)
        self._rehold_script = self._redis.register_script(REHOLD)
        # (subject, period id) -> {member: (generation admitted under, expiry unix ms)}: this
        # process's budget reservations in flight, held again in a rebuilt counter.
        self._open: dict[tuple[str, str], dict[str, tuple[str, int]]] = {}
        self.recent = RecentSpend()
        self._gens: dict[tuple[str, str], str] = {}  # (subject, period id) -> counter generation accounted for
        self._stale = False  # a call failed: reconcile and retry the pending settlements first
        self._epoch: bytes | None = None  # the last {p}:epoch seen
        # (keys, args, what to count in ``recent`` once it lands: (subject, pid, at, nano) or None)
        self._pending: deque[tuple[list[str], list, tuple | None]] = deque(maxlen=_PENDING_MAX)
        self._recovering = asyncio.Lock()
        self._watch: asyncio.Task | None = None

    def _keys(self, subject: str, window: int, pid: str) -> list[str]:
        p = self.prefix
        return [f"{p}:w:{subject}:{window}", f"{p}:s:{subject}:{pid}", f"{p}:z:{subject}:{pid}", f"{p}:epoch"]

    def _settle_keys(self, subject: str, window: int, pid: str, member: str) -> list[str]:
        return [*self._keys(subject, window, pid)[:3], f"{self.prefix}:l:{member}"]

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
                keys, args, count = self._pending[0]
                gen = await self._call(self._settle, keys, args)  # stale again on failure: kept for the next try
                self._pending.popleft()
                if count is not None and gen != 0:
                    self.recent.add(*count, gen=_text(gen))
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
            verdict, requests, window_tokens, spent, epoch, gen, cut = await self._call(self._admit, keys, args)
        except LimiterUnavailable:
            # Redis may have run the script after the client gave up (a hang): release the
            # reservation once it answers again, or it holds budget until it expires.
            self._pending.append((self._settle_keys(limits.subject, window, pid, member),
                                  [-tokens, -cost, 0, member, "", 1], None))
            raise
        if self._epoch is not None and epoch != self._epoch:
            self.forget_seeds()  # another replica lost Redis for a while: reconcile from the store
        self._epoch = epoch
        if verdict == 4:
            return None
        if limits.budget_usd is not None:
            await self._meet(limits.subject, pid, _text(gen), int(cut))
        if verdict in (1, 2):
            what = f"{limits.rpm} requests" if verdict == 1 else f"{limits.tpm} tokens"
            raise RateLimitExceeded(f"Rate limit reached: {what} per minute", retry_after_s=left,
                                    headers=ratelimit_headers(limits, int(requests), int(window_tokens), left))
        if verdict == 3:
            raise BudgetExceeded(
                f"Budget of {limits.budget_usd:.6f} USD {limits.per_period} is spent "
                f"({int(spent) / NANO:.6f} USD used)",
                retry_after_s=period_retry_after(limits.period))
        if limits.budget_usd is not None:
            self._open.setdefault((limits.subject, pid), {})[member] = (_text(gen), args[8])
        return Reservation(limits, window, pid, tokens, cost, int(requests), int(window_tokens), left,
                           member=member, gen=_text(gen))

    async def reconcile(self, limits: Limits) -> None:
        """Reconcile the counter of ``limits`` with the store now: a seeded counter takes the
        larger of its spend and the store's; a lost one (no ``seeded``) is rebuilt from the
        store's spend before a cut :data:`RECENT_S` ago plus this process's spend since
        (:mod:`gateway.limits.recent`). A store that cannot be read counts as 0 (the rebuild
        keeps this process's recent spend) and is asked again after ``SEED_RETRY_S``."""
        pid = period_id(limits.period)
        cut = int(time.time() - RECENT_S)
        whole = before = 0.0
        failed = False
        if self.recorded_spend is not None:
            try:
                whole, before = await asyncio.to_thread(self._store_spend, limits.subject,
                                                        period_start(limits.period), cut)
            except Exception as exc:  # the store is down: count from what the limiter sees
                failed, cut = True, 0
                log.warning("budget of %s: recorded spend unreadable (%s); counting from what this gateway sees "
                            "for now", limits.subject, type(exc).__name__)
        rebuilt = to_nano(before) + self.recent.total(limits.subject, pid, cut)
        key = self._keys(limits.subject, 0, pid)[1]
        built, gen, gen_cut = await self._call(
            self._reconcile_script, [key],
            [to_nano(whole), rebuilt, _PERIOD_TTL_S.get(limits.period, 0), uuid.uuid4().hex[:12], cut])
        last = time.monotonic()
        if built:
            self._gens[(limits.subject, pid)] = _text(gen)
            await self._rehold(limits.subject, pid, _text(gen))
            # Once the other replicas' recent spend is in the store, take the store's whole figure.
            last -= RECONCILE_S - (_JOIN_S - RECENT_S + 5.0)
            log.info("budget counter of %s built (new, or lost by Redis): %.6f USD", limits.subject, rebuilt / NANO)
        else:
            await self._meet(limits.subject, pid, _text(gen), int(gen_cut))
        self._seeded[(limits.subject, pid)] = (last, failed)

    def _store_spend(self, subject: str, since, cut: int) -> tuple[float, float]:
        """The store's spend of ``subject`` since ``since``: in all, and of outcomes before ``cut``."""
        from datetime import datetime, timezone

        assert self.recorded_spend is not None
        return (self.recorded_spend(subject, since),
                self.recorded_spend(subject, since, datetime.fromtimestamp(cut, timezone.utc)))

    async def _meet(self, subject: str, pid: str, gen: str, cut: int) -> None:
        """A counter generation seen: if it is new to this process and was rebuilt by another
        replica lately (until :data:`_JOIN_S` after its cut), add this process's spend from its
        cut on that did not land in it, unless a reconciliation took the store's figure
        since (the script's ``closed``: the store may hold that spend already)."""
        if not gen or self._gens.get((subject, pid)) == gen:
            return
        self._gens[(subject, pid)] = gen
        await self._rehold(subject, pid, gen)
        if time.time() > cut + _JOIN_S:
            return
        extra = self.recent.total(subject, pid, cut, landed_outside=gen)
        if extra > 0:
            await self._call(self._contribute, [self._keys(subject, 0, pid)[1]], [extra, gen])
            log.warning("budget counter of %s was rebuilt by another replica: added this gateway's recent "
                        "%.6f USD", subject, extra / NANO)

    async def _rehold(self, subject: str, pid: str, gen: str) -> None:
        """Hold this process's reservations in flight that were admitted under an earlier
        counter generation again in ``gen``: Redis lost them with the counter, and until they
        settle the rebuilt counter would not count them (docs/LIMITS.md)."""
        now_ms = int(time.time() * 1000)
        flying = self._open.get((subject, pid), {})
        for member in [m for m, (_, expiry) in flying.items() if expiry <= now_ms]:
            del flying[member]  # expired in Redis too; its settlement (if any) counts nothing
        held = [(m, expiry) for m, (g, expiry) in flying.items() if g != gen]
        if not held:
            return
        keys = self._keys(subject, 0, pid)
        args: list = [gen, _PERIOD_TTL_S.get(_period_of(pid), 0)]
        for member, expiry in held:
            args += [member, expiry]
        await self._call(self._rehold_script, [keys[1], keys[2], *(f"{self.prefix}:l:{m}" for m, _ in held)], args)

    async def settle(self, reservation: Reservation, tokens: int, cost_usd: float, at: float | None = None) -> None:
        limits = reservation.limits
        flying = self._open.get((limits.subject, reservation.period_id))
        if flying is not None:
            flying.pop(reservation.member, None)
            if not flying:
                del self._open[(limits.subject, reservation.period_id)]
        keys = self._settle_keys(limits.subject, reservation.window, reservation.period_id, reservation.member)
        nano = to_nano(cost_usd)
        args = [tokens - reservation.tokens, -reservation.cost_nano, nano, reservation.member, reservation.gen,
                int(self.reservation_ttl_s) + 1]
        count = ((limits.subject, reservation.period_id, time.time() if at is None else at, nano)
                 if limits.budget_usd is not None and nano > 0 else None)
        try:
            gen = await self._call(self._settle, keys, args)
        except LimiterUnavailable:
            self._pending.append((keys, args, count))  # retried when Redis answers again
            raise
        if count is not None and gen != 0:  # 0: counted before (a retry), or its reservation expired
            self.recent.add(*count, gen=_text(gen))

    def count_unadmitted(self, limits: Limits, cost_usd: float, at: float | None = None) -> None:
        if limits.budget_usd is not None:
            self.recent.add(limits.subject, period_id(limits.period), time.time() if at is None else at,
                            to_nano(cost_usd))

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


def _text(value) -> str:
    """A script's string result (bytes from redis-py) as ``str``."""
    return value.decode() if isinstance(value, bytes) else str(value or "")


def _period_of(pid: str) -> str:
    """The budget period of a period id (``20261206`` day, ``202612`` month, ``total``)."""
    return {8: "day", 6: "month"}.get(len(pid), "total")
