"""Agent-session benchmark: per-request routing against session-aware routing.

Run: ``python -m bench.sessions [--sessions 40] [--seed 0] [--profile agent|chat|all]
[--difficulty turn|session|all] [--prices anthropic|openai|all] [--local-ttl 60] [--json out.json]``

Conversations shaped like coding and chat agents' (parameters printed with the results): a
system prompt with tool definitions of 5-20k tokens shared by the sessions of one agent,
10-60 turns, 300-3,000 tokens added per turn (user text and tool results), answers of
100-600 tokens. Each turn is decided by the real engine (:class:`router.engine.Router`) and,
for the session-aware policies, the gateway's session tracking (:class:`gateway.sessions.Sessions`,
in process). Three backends stand for the usual mix: ``strong`` and ``mid`` hosted, billed
as Anthropic or OpenAI bill a prefix cache (``--prices``), ``local`` a self-hosted vLLM
pool whose prefix cache evicts an idle conversation (``--local-ttl``). Prices, bills, cache
lifetimes, difficulty, the cost floor and the best in hindsight: :mod:`bench.sessions_model`.

Time is simulated: turns are separated by gaps drawn per profile (``agent``: model and tool
time; ``chat``: a person reading and typing). The engine sees the same ages (the session
state's timestamps are set from the simulated clock before each decision), and judges them
by :data:`router.live.PREFIX_TTL_S` for every backend: it does not know when the local pool
evicts. TTFT is a
prefill model: a base latency plus uncached tokens over the backend's prefill rate.

Turn difficulty (``--difficulty``): drawn per turn, so per-request routing moves a
conversation between models whenever a turn's difficulty crosses a bar and pays the part of
the prefix the new backend does not hold; or once per conversation, shared by its turns.

Policies, side by side on the same conversations: ``per_request`` (sessions off),
``session`` (the default session block), ``session_downgrade`` (``allow_downgrade: true``),
``downgrade_uncapped`` (the same with ``max_switches: 1000``), ``always_strongest``,
``always_cheapest``; and two bounds, not policies: ``hindsight`` (the cheapest bar-holding
choices knowing every turn in advance) and ``floor`` (the cost floor). Printed per profile,
prices, difficulty and policy: USD per session (mean), cached share of input tokens after
the second turn, switches per session (median), TTFT p50/p99 (s), the share of turns whose
chosen model's predicted quality clears the bar of the full route (0.9 x the best of the
three), and the share of turns on ``strong``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field

from bench.sessions_model import (DIFFICULTY, PREFILL, PRICES, TARGET, Caches, TurnPredictor, backends_yaml, clears,
                                  difficulties, hindsight)
from gateway.sessions import Sessions
from router.engine import Router, RoutingRequest
from router.live import PREFIX_TTL_S
from router.policy import parse_policy

BAR = f"{{target: {TARGET}}}"
_ALL3 = "[strong, mid, local]"
POLICIES = {
    "per_request": f"{{name: auto, backends: {_ALL3}, quality_bar: {BAR}, session: {{enabled: false}}}}",
    "session": f"{{name: auto, backends: {_ALL3}, quality_bar: {BAR}}}",
    "session_downgrade": f"{{name: auto, backends: {_ALL3}, quality_bar: {BAR}, session: {{allow_downgrade: true}}}}",
    "downgrade_uncapped": f"{{name: auto, backends: {_ALL3}, quality_bar: {BAR}, "
                          "session: {allow_downgrade: true, max_switches: 1000}}",
    "always_strongest": f"{{name: auto, backends: [strong], quality_bar: {BAR}, session: {{enabled: false}}}}",
    "always_cheapest": f"{{name: auto, backends: [local], quality_bar: {BAR}, session: {{enabled: false}}}}",
}
WORKLOAD = {"agents": 3, "system_tokens": (5_000, 20_000), "turns": (10, 60), "added_tokens": (300, 3_000),
            "answer_tokens": (100, 600), "hosted_cache_ttl_s": PREFIX_TTL_S}
#: Seconds between two turns of a conversation (uniform), per profile.
PROFILES = {"agent": (3.0, 60.0), "chat": (20.0, 600.0)}


def _text(rng: random.Random, tokens: int) -> str:
    # chars/4 is the engine's token estimate (backends.openai_shapes.estimate_tokens): 4-char words.
    return " ".join(f"{rng.randrange(36 ** 3):03x}" for _ in range(tokens))


@dataclass
class Totals:
    usd: list[float] = field(default_factory=list)
    switches: list[int] = field(default_factory=list)
    ttft: list[float] = field(default_factory=list)
    used: Counter = field(default_factory=Counter)
    input_tokens: int = 0
    cached_tokens: int = 0
    turns: int = 0
    cleared: int = 0


def _conversations(n: int, seed: int, gaps: tuple[float, float], difficulty: str) -> list[dict]:
    rng = random.Random(seed)
    hard = random.Random(f"{seed}/difficulty")  # the same texts and gaps under either difficulty
    systems = [_text(rng, rng.randint(*WORKLOAD["system_tokens"])) for _ in range(WORKLOAD["agents"])]
    out = []
    for i in range(n):
        turns = rng.randint(*WORKLOAD["turns"])
        out.append({"system": systems[i % len(systems)], "agent": i % len(systems),
                    "added": [_text(rng, rng.randint(*WORKLOAD["added_tokens"])) for _ in range(turns)],
                    "answers": [_text(rng, rng.randint(*WORKLOAD["answer_tokens"])) for _ in range(turns)],
                    "difficulty": difficulties(hard, turns, difficulty),
                    "gaps": [rng.uniform(*gaps) for _ in range(turns)]})
    return out


def _turns(conv: dict):
    """Per turn: (messages so far, prompt tokens, answer text, answer tokens, difficulty, gap)."""
    messages = [{"role": "system", "content": conv["system"]}]
    for added, answer, d, gap in zip(conv["added"], conv["answers"], conv["difficulty"], conv["gaps"]):
        messages.append({"role": "user", "content": added})
        yield messages, sum(len(m["content"]) // 4 + 1 for m in messages), answer, len(answer) // 4 + 1, d, gap
        messages.append({"role": "assistant", "content": answer})


def _age_session(state, caches: Caches, now: float) -> None:
    """Set the session's cache timestamps (real time) to the simulated ages of its copies."""
    real = time.time()
    for backend, held in state.held.items():
        if backend in caches.held:
            held[1] = real - (now - caches.held[backend][1])


async def run_policy(name: str, conversations: list[dict], prices: str, local_ttl: float | None) -> Totals:
    predictor = TurnPredictor()
    router = Router(parse_policy(f"version: 1\n{backends_yaml(prices)}routes:\n  - {POLICIES[name]}\n"),
                    predictor=predictor)
    sessions = Sessions()
    totals = Totals()
    system_warm: dict[int, set[str]] = {}  # agent -> backends holding its system prompt
    for conv in conversations:
        caches = Caches(prices, len(conv["system"]) // 4, system_warm.setdefault(conv["agent"], set()), local_ttl)
        usd, switches, last, now = 0.0, 0, None, 0.0
        for turn, (messages, tokens_in, answer, tokens_out, d, gap) in enumerate(_turns(conv)):
            now += gap
            body = {"model": "auto", "messages": messages}
            ticket = await sessions.open(router, None, {}, body)
            if ticket is not None:
                _age_session(ticket.state, caches, now)
            predictor.difficulty = d
            decision = await router.decide(RoutingRequest("chat", body, session=ticket.state if ticket else None))
            backend = decision.record.chosen
            cost, cached = caches.serve(backend, tokens_in, tokens_out, now)
            usd += cost
            base, rate = PREFILL[backend]
            totals.ttft.append(base + (tokens_in - cached) / rate)
            if turn >= 2:
                totals.input_tokens += tokens_in
                totals.cached_tokens += cached
            totals.turns += 1
            totals.used[backend] += 1
            totals.cleared += backend in clears(d)
            switches += last is not None and backend != last
            last = backend
            if decision.record.prefix_hash:
                router.live.saw_prefix(backend, decision.record.prefix_hash)
            if ticket is not None:
                await sessions.close(ticket, backend, True, tokens_in, tokens_out=tokens_out)
        totals.usd.append(usd)
        totals.switches.append(switches)
    return totals


def floor(conversations: list[dict], prices: str, local_ttl: float | None) -> Totals:
    """The cost floor (:meth:`bench.sessions_model.Caches.floor`) of each conversation."""
    totals = Totals()
    for conv in conversations:
        caches = Caches(prices, len(conv["system"]) // 4, set(), local_ttl)
        usd, before = 0.0, 0
        for messages, tokens_in, _answer, tokens_out, d, gap in _turns(conv):
            cost, backend = caches.floor(d, tokens_in, tokens_out, before, gap)
            usd += cost
            totals.turns += 1
            totals.cleared += 1
            totals.used[backend] += 1
            before = tokens_in + tokens_out
        totals.usd.append(usd)
    return totals


def hindsight_totals(conversations: list[dict], prices: str, local_ttl: float | None) -> Totals:
    """The best each conversation could do knowing its turns (:func:`bench.sessions_model.hindsight`)."""
    totals = Totals()
    for conv in conversations:
        turns = [(tokens_in, tokens_out, d, gap) for _m, tokens_in, _a, tokens_out, d, gap in _turns(conv)]
        usd, switches, path = hindsight(prices, len(conv["system"]) // 4, local_ttl, turns)
        totals.usd.append(usd)
        totals.switches.append(switches)
        totals.used.update(path)
        totals.turns += len(path)
        totals.cleared += len(path)
    return totals


def _row(name: str, t: Totals) -> dict:
    q = statistics.quantiles(t.ttft, n=100) if t.ttft else None
    return {"policy": name, "usd_per_session": statistics.fmean(t.usd),
            "cached_share_after_turn_2": t.cached_tokens / t.input_tokens if t.input_tokens else None,
            "switches_median": statistics.median(t.switches) if t.switches else None,
            "ttft_p50_s": statistics.median(t.ttft) if t.ttft else None, "ttft_p99_s": q[98] if q else None,
            "bar_cleared_share": t.cleared / max(1, t.turns), "strong_share": t.used["strong"] / max(1, t.turns)}


async def run(n: int, seed: int, profile: str, prices: str = "anthropic", difficulty: str = "turn",
              local_ttl: float | None = 60.0) -> list[dict]:
    conversations = _conversations(n, seed, PROFILES[profile], difficulty)
    tag = {"profile": profile, "prices": prices, "difficulty": difficulty}
    rows = [{**tag, **_row(name, await run_policy(name, conversations, prices, local_ttl))} for name in POLICIES]
    return rows + [{**tag, **_row("hindsight", hindsight_totals(conversations, prices, local_ttl))},
                   {**tag, **_row("floor", floor(conversations, prices, local_ttl))}]


def _f(v, fmt: str, width: int) -> str:
    return f"{'-':>{width}}" if v is None else f"{v:>{width}{fmt}}"


def _print(rows: list[dict]) -> None:
    base = next(r for r in rows if r["policy"] == "per_request")["usd_per_session"]
    print(f"{'policy':<20}{'USD/session':>12}{'x per_req':>10}{'cached':>9}{'switches':>10}{'TTFT p50':>10}"
          f"{'TTFT p99':>10}{'bar held':>10}{'strong':>8}")
    for r in rows:
        print(f"{r['policy']:<20}{r['usd_per_session']:>12.4f}{r['usd_per_session'] / base:>10.3f}"
              f"{_f(r['cached_share_after_turn_2'], '.1%', 9)}{_f(r['switches_median'], '.1f', 10)}"
              f"{_f(r['ttft_p50_s'], '.2f', 10)}{_f(r['ttft_p99_s'], '.2f', 10)}"
              f"{r['bar_cleared_share']:>10.1%}{r['strong_share']:>8.1%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", choices=[*PROFILES, "all"], default="all")
    parser.add_argument("--difficulty", choices=[*DIFFICULTY, "all"], default="turn",
                        help="turn: drawn per turn; session: one per conversation, shared by its turns")
    parser.add_argument("--prices", choices=[*PRICES, "all"], default="anthropic",
                        help="how the hosted backends are priced and bill their prefix caches")
    parser.add_argument("--local-ttl", type=float, default=60.0,
                        help="seconds of idle after which the local pool evicts a conversation (0: never)")
    parser.add_argument("--json", default=None, help="also write the rows and the workload to this file")
    args = parser.parse_args()
    local_ttl = args.local_ttl or None
    print(f"workload: {args.sessions} sessions, seed {args.seed}, bar {BAR}, local TTL {local_ttl} s, "
          f"{json.dumps(WORKLOAD)}")
    rows = []
    for prices in PRICES if args.prices == "all" else [args.prices]:
        for difficulty in DIFFICULTY if args.difficulty == "all" else [args.difficulty]:
            for profile in PROFILES if args.profile == "all" else [args.profile]:
                found = asyncio.run(run(args.sessions, args.seed, profile, prices, difficulty, local_ttl))
                print(f"\nprices {prices}, difficulty {DIFFICULTY[difficulty]}, profile {profile}: "
                      f"{PROFILES[profile][0]:g}-{PROFILES[profile][1]:g} s between turns")
                _print(found)
                rows += found
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"workload": WORKLOAD, "profiles": PROFILES, "prices": PRICES, "local_ttl_s": local_ttl,
                       "sessions": args.sessions, "seed": args.seed, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
