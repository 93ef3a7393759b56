"""Money and records scenarios of the fault suite (``python -m bench.faults --only money``).

Each scenario starts its own private PostgreSQL and Redis (:mod:`bench.fault_env`) and real
gateway processes (two sharing them, where replicas matter), drives them over HTTP with an
API key under a USD budget, breaks Redis or the store, and checks the goal:

- ``money: redis restart``: Redis restarted empty mid-budget; the next request sees the
  true spend, and spend ends within the budget plus one request.
- ``money: redis restart, store lagging``: the same while the store lags the gateways (its
  writers flush every 10 s), so the store alone does not know the spend: after one request
  per gateway the counter holds at least the spend before the restart, and spend ends within
  the budget plus one request.
- ``money: redis restart, requests in flight``: Redis restarted empty while slow requests
  hold reservations on both gateways; the rebuilt counter holds them again, so spend ends
  within the budget plus one request (without it, plus the requests in flight).
- ``money: redis outage``: Redis killed while requests are admitted fail-open (the default
  ``on_unavailable: open``), then started; spend ends within the budget plus the window's
  admitted spend plus one request, and the first request after recovery is refused when the
  store already shows the budget spent.
- ``money: redis hang``: Redis stopped (SIGSTOP) past the gateways' Redis timeout, then
  resumed; no reservation is left holding budget, and spend stays within the same bound.
- ``money: stream without usage``: streams from an upstream that sends no usage are
  recorded with counted tokens, marked estimated, and billed to the budget.
- ``money: journal full``: the database stopped and the journal capped small; the gateway
  refuses (503 ``store_unavailable``) before it answers a request whose records it would
  lose, and every answered request's records reach the database once it is back.
- ``money: shared journal``: two gateways in one folder get their own journals; a third
  given one of them refuses to start.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import sqlalchemy as sa

from bench.fault_env import GatewayProcess, PrivatePostgres, PrivateRedis
from bench.faults import Row

BUDGET = 0.05
PRICE_PER_1M = 150.0  # USD per million tokens, in and out: a request costs a few thousandths
MAX_TOKENS = 20  # a ceiling, so a reservation is the most a request can cost
SLOW_S = 4.0  # the slow route's wait before its first token: requests in flight across a restart
POLICY = f"""version: 1
backends:
  - {{name: priced, kind: fake, model: priced-model, quality: 0.9,
      pricing: {{input_per_1m: {PRICE_PER_1M}, output_per_1m: {PRICE_PER_1M}}}}}
  - {{name: silent, kind: fake, model: silent-no-usage, quality: 0.9,
      pricing: {{input_per_1m: {PRICE_PER_1M}, output_per_1m: {PRICE_PER_1M}}}}}
  - {{name: sluggish, kind: fake, model: priced-model-slow, quality: 0.9, options: {{first_token_delay_s: {SLOW_S}}},
      pricing: {{input_per_1m: {PRICE_PER_1M}, output_per_1m: {PRICE_PER_1M}}}}}
routes:
  - {{name: auto, backends: [priced]}}
  - {{name: no-usage, backends: [silent]}}
  - {{name: slow, backends: [sluggish]}}
"""
BASE_ENV = {"MIXROUTE_REDIS_TIMEOUT_S": "0.5", "MIXROUTE_STORE_FLUSH_INTERVAL_S": "0.05",
            "MIXROUTE_POLICY_WATCH": "false", "MIXROUTE_KEY_CACHE_TTL_S": "1"}


@dataclass
class Money:
    """A private PostgreSQL and Redis, gateways sharing them, and one key under :data:`BUDGET`."""

    root: Path
    pg: PrivatePostgres
    redis: PrivateRedis
    gateways: list[GatewayProcess] = field(default_factory=list)
    key: str = ""
    key_id: str = ""
    answered: list[str] = field(default_factory=list)
    sent: int = 0
    billed: float = 0.0  # USD the answers said they cost (x-mixroute-cost-usd)

    def post(self, route: str = "auto", stream: bool = False) -> httpx.Response:
        """One chat request with the key, round robin over the gateways."""
        gw = self.gateways[self.sent % len(self.gateways)]
        self.sent += 1
        body = {"model": route, "max_tokens": MAX_TOKENS, "stream": stream,
                "messages": [{"role": "user", "content": f"how much does request {self.sent} cost?"}]}
        resp = httpx.post(gw.url + "/v1/chat/completions", json=body, timeout=30,
                          headers={"authorization": f"Bearer {self.key}"})
        if resp.status_code == 200:
            self.answered.append(resp.headers["x-mixroute-request-id"])
            self.billed += float(resp.headers["x-mixroute-cost-usd"])
        return resp

    def spend(self) -> float:
        """USD the store recorded for the key."""
        return self._scalar("SELECT coalesce(sum(o.cost_usd), 0) FROM outcomes o JOIN decisions d "
                            "ON d.request_id = o.request_id WHERE d.key_id = :k", k=self.key_id)

    def outcomes(self) -> int:
        return int(self._scalar("SELECT count(*) FROM outcomes WHERE request_id = ANY(:ids)", ids=self.answered))

    def settle_store(self, timeout_s: float = 20) -> int:
        """Wait until every answered request's outcome is in the store; how many are."""
        deadline = time.monotonic() + timeout_s
        while (n := self.outcomes()) < len(self.answered) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.3)  # the limiter's settlement runs just after the outcome is queued
        return n

    def counter(self) -> dict[str, int]:
        """The key's Redis budget counter: ``spent``, ``reserved`` (nano-USD) and ``open``
        reservations (0 where the counter has no such field)."""
        import redis

        client = redis.Redis.from_url(self.redis.url)
        try:
            fields = client.hgetall(f"mixroute:s:{self.key_id}:total")
            return {"spent": int(fields.get(b"spent", 0)), "reserved": int(fields.get(b"reserved", 0)),
                    "open": int(client.zcard(f"mixroute:z:{self.key_id}:total"))}
        finally:
            client.close()

    def until_refused(self, limit: int = 80) -> httpx.Response:
        """Requests until one is not a 200 (or ``limit`` requests); the last answer."""
        for _ in range(limit):
            resp = self.post()
            if resp.status_code != 200:
                return resp
        return resp

    def spend_to(self, usd: float) -> None:
        while self.spend() < usd:
            resp = self.post()
            assert resp.status_code == 200, resp.text
            self.settle_store()

    def _scalar(self, sql: str, **params) -> float:
        engine = sa.create_engine(self.pg.url)
        try:
            with engine.connect() as conn:
                return float(conn.execute(sa.text(sql), params).scalar_one())
        finally:
            engine.dispose()


def _request_cost() -> float:
    """The most one request can cost (its reservation): prompt plus ``MAX_TOKENS``, priced."""
    from backends.openai_shapes import estimate_tokens

    prompt = estimate_tokens("how much does request 1000 cost?") + 8  # chat formatting, generously
    return (prompt + MAX_TOKENS) * PRICE_PER_1M / 1e6


@contextmanager
def money(gateways: int = 2, env: dict[str, str] | None = None, budget: float | None = BUDGET) -> Iterator[Money]:
    """Start the private servers, create the key (``budget`` USD in total), start
    ``gateways`` gateways; stop all after."""
    from gateway.auth.keys import create_key
    from gateway.store.db import make_engine, upgrade

    root = Path(tempfile.mkdtemp(prefix="mixroute-faults-money-"))
    (root / "policy.yaml").write_text(POLICY)
    pg, redis_server = PrivatePostgres(), PrivateRedis()
    m = Money(root, pg, redis_server)
    try:
        pg.start()
        redis_server.start()
        engine = make_engine(pg.url)
        upgrade(engine)
        m.key, info = create_key(engine, "faults", budget_usd=budget, period="total")
        m.key_id = info.key_id
        engine.dispose()
        full_env = {**BASE_ENV, "MIXROUTE_DATABASE_URL": pg.url, "MIXROUTE_REDIS_URL": redis_server.url, **(env or {})}
        for _ in range(gateways):
            gw = GatewayProcess(root / "policy.yaml", full_env, cwd=root)
            m.gateways.append(gw)
            gw.start()
        yield m
    finally:
        for gw in m.gateways:
            gw.stop()
        redis_server.kill()
        pg.destroy()


def _row(name: str, m: Money, passed: bool, detail: str) -> Row:
    return Row(name, len(m.answered), m.outcomes(), f"${m.spend():.4f} / ${BUDGET:.3f}", passed, detail)


def redis_restart() -> Row:
    name = "money: redis restart"
    with money() as m:
        m.spend_to(BUDGET * 0.6)
        before = m.spend()
        m.redis.kill()
        m.redis.start()  # empty
        first = m.post()
        seen = m.counter()["spent"] / 1e9
        m.until_refused()
        m.settle_store()
        one = _request_cost()
        passed = seen >= before - 1e-9 and m.spend() <= BUDGET + one
        return _row(name, m, passed, f"counter after restart ${seen:.4f} (store had ${before:.4f}); "
                                     f"first {first.status_code}; bound budget + ${one:.4f}")


def redis_restart_store_lagging() -> Row:
    name = "money: redis restart, store lagging"
    with money(env={"MIXROUTE_STORE_FLUSH_INTERVAL_S": "10"}) as m:
        while m.billed < BUDGET * 0.6:
            resp = m.post()
            assert resp.status_code == 200, resp.text
        time.sleep(0.3)  # the settlements run just after the answers
        before, in_store = m.billed, m.spend()
        m.redis.kill()
        m.redis.start()  # empty
        firsts = [m.post().status_code for _ in m.gateways]  # one request on each gateway
        seen = m.counter()["spent"] / 1e9
        last = m.until_refused()
        m.settle_store(timeout_s=40)
        one = _request_cost()
        passed = (in_store < before and firsts == [200] * len(firsts) and seen >= before - 1e-9
                  and last.status_code == 429 and m.spend() <= BUDGET + one)
        return _row(name, m, passed, f"store had ${in_store:.4f} of ${before:.4f} at the restart; counter after "
                                     f"one request per gateway ${seen:.4f}; bound budget + ${one:.4f}")


def redis_restart_in_flight() -> Row:
    import concurrent.futures

    name = "money: redis restart, requests in flight"
    with money() as m:
        m.spend_to(BUDGET * 0.4)

        def slow(gw: GatewayProcess) -> httpx.Response:
            return httpx.post(gw.url + "/v1/chat/completions", timeout=60, headers={"authorization": f"Bearer {m.key}"},
                              json={"model": "slow", "max_tokens": MAX_TOKENS,
                                    "messages": [{"role": "user", "content": "a slow question, please"}]})

        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            flying = [pool.submit(slow, gw) for gw in m.gateways for _ in range(2)]
            time.sleep(1.0)  # all four admitted, their reservations held
            m.redis.kill()
            m.redis.start()  # empty
            last = m.until_refused()  # while the four are still in flight
            early = sum(f.done() for f in flying)
            slow_answers = [f.result() for f in flying]
        for resp in slow_answers:
            if resp.status_code == 200:
                m.answered.append(resp.headers["x-mixroute-request-id"])
        m.settle_store()
        one = _request_cost()
        passed = (early == 0 and [r.status_code for r in slow_answers] == [200] * 4 and last.status_code == 429
                  and m.spend() <= BUDGET + one)
        return _row(name, m, passed, f"4 requests in flight across the restart ({early} ended before the refusal); "
                                     f"bound budget + ${one:.4f} (in flight: up to ${4 * one:.4f})")


def redis_outage() -> Row:
    name = "money: redis outage"
    with money() as m:
        m.spend_to(BUDGET * 0.6)
        m.redis.kill()
        start = m.spend()
        window = [m.post().status_code for _ in range(8)]  # admitted fail-open
        m.settle_store()
        admitted = m.spend() - start
        m.redis.start()
        over_before = m.spend() >= BUDGET
        first = m.post()
        last = m.until_refused() if first.status_code == 200 else first
        m.settle_store()
        one = _request_cost()
        bound = BUDGET + admitted + one
        refused_at_once = first.status_code == 429 or not over_before
        passed = (window.count(200) == 8 and refused_at_once and m.spend() <= bound
                  and last.status_code == 429)
        return _row(name, m, passed, f"fail-open window admitted ${admitted:.4f}; first after recovery "
                                     f"{first.status_code} (store over budget: {over_before}); bound ${bound:.4f}")


def redis_hang() -> Row:
    name = "money: redis hang"
    with money() as m:
        m.spend_to(BUDGET * 0.3)
        start = m.spend()
        m.redis.pause()
        try:
            window = [m.post().status_code for _ in range(3)]  # each waits out the Redis timeout
        finally:
            m.redis.resume()
        m.settle_store()
        admitted = m.spend() - start
        m.post()  # the first request after the hang reconciles and retries what failed
        m.settle_store()
        deadline = time.monotonic() + 5  # a gateway without requests retries within a second or two
        while (left := m.counter())["open"] and time.monotonic() < deadline:
            time.sleep(0.2)
        m.until_refused()
        m.settle_store()
        bound = BUDGET + admitted + _request_cost()
        passed = window.count(200) == 3 and left["reserved"] == 0 and left["open"] == 0 and m.spend() <= bound
        return _row(name, m, passed, f"after the hang: reserved {left['reserved'] / 1e9:.4f} USD in "
                                     f"{left['open']} open reservation(s); bound ${bound:.4f}")


def stream_without_usage() -> Row:
    name = "money: stream without usage"
    with money(gateways=1) as m:
        codes = []
        for _ in range(4):
            with httpx.stream("POST", m.gateways[0].url + "/v1/chat/completions", timeout=30,
                              headers={"authorization": f"Bearer {m.key}"},
                              json={"model": "no-usage", "stream": True, "max_tokens": MAX_TOKENS,
                                    "messages": [{"role": "user", "content": "stream me something"}]}) as resp:
                resp.read()
                codes.append(resp.status_code)
                if resp.status_code == 200:
                    m.answered.append(resp.headers["x-mixroute-request-id"])
        m.settle_store()
        rows = _outcome_rows(m)
        counted = [r for r in rows if r["tokens_in"] > 0 and r["tokens_out"] > 0 and r["cost_usd"] > 0
                   and r.get("usage_estimated")]
        billed = m.counter()["spent"] / 1e9
        passed = codes == [200] * 4 and len(counted) == 4 and billed >= m.spend() > 0
        return _row(name, m, passed, f"{len(counted)}/4 outcomes counted, billed and marked estimated; "
                                     f"budget counter ${billed:.4f}")


def _outcome_rows(m: Money) -> list[dict]:
    engine = sa.create_engine(m.pg.url)
    try:
        with engine.connect() as conn:
            return [dict(r) for r in conn.execute(sa.text("SELECT * FROM outcomes WHERE request_id = ANY(:ids)"),
                                                  {"ids": m.answered}).mappings()]
    finally:
        engine.dispose()


def journal_full() -> Row:
    name = "money: journal full"
    env = {"MIXROUTE_STORE_JOURNAL_MAX_BYTES": str(96 * 1024), "MIXROUTE_REDIS_URL": ""}
    with money(gateways=1, env=env, budget=None) as m:
        m.post()  # the key is known to the gateway before its store goes down
        m.pg.stop()
        last = m.until_refused(limit=400)
        code = _code(last)
        m.pg.start()
        recorded = m.settle_store(timeout_s=30)
        decisions = int(m._scalar("SELECT count(*) FROM decisions WHERE request_id = ANY(:ids)", ids=m.answered))
        passed = last.status_code == 503 and code == "store_unavailable" and recorded == decisions == len(m.answered)
        return Row(name, len(m.answered), recorded, "", passed,
                   f"refused with {last.status_code} {code}; {decisions} decisions, {recorded} outcomes for "
                   f"{len(m.answered)} answered")


def _code(resp: httpx.Response) -> str | None:
    try:
        return resp.json()["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return None


def shared_journal() -> Row:
    name = "money: shared journal"
    from gateway.store.journal_lock import journal_holder
    from gateway.store.rows import default_journal_path

    with money(gateways=2, env={"MIXROUTE_REDIS_URL": ""}, budget=None) as m:
        a, b = m.gateways
        # A server database's default journal lives in the gateway's working directory.
        paths = {m.root / default_journal_path(m.pg.url, gw.port).name for gw in (a, b)}
        shared = m.root / default_journal_path(m.pg.url, a.port).name
        third = GatewayProcess(m.root / "policy.yaml", {**a.env, "MIXROUTE_STORE_JOURNAL_PATH": str(shared)},
                               cwd=m.root)
        res = third.run_to_exit(timeout_s=30)
        line = next((ln for ln in res.stderr.splitlines() if "in use by another" in ln), "")
        for _ in range(4):
            m.post()
        m.settle_store()
        passed = (len(paths) == 2 and all(journal_holder(p) for p in paths) and res.returncode == 2 and bool(line)
                  and m.outcomes() == len(m.answered))
        return Row(name, len(m.answered), m.outcomes(), "", passed,
                   f"{len(paths)} journals for 2 gateways; a third on a shared one exits {res.returncode}"
                   + (": refused, in use" if line else f": {json.dumps(res.stderr[-200:])}"))


SCENARIOS = [
    ("money: redis restart", 1, redis_restart),
    ("money: redis restart, store lagging", 1, redis_restart_store_lagging),
    ("money: redis restart, requests in flight", 1, redis_restart_in_flight),
    ("money: redis outage", 1, redis_outage),
    ("money: redis hang", 1, redis_hang),
    ("money: stream without usage", 2, stream_without_usage),
    ("money: journal full", 3, journal_full),
    ("money: shared journal", 4, shared_journal),
]
