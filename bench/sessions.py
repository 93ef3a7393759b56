"""Agent-session benchmark: per-request routing against session-aware routing.

Run: ``python -m bench.sessions [--sessions 40] [--seed 0] [--json out.json]``

Conversations shaped like coding and chat agents' (parameters printed with the results): a
system prompt with tool definitions of 5-20k tokens shared by the sessions of one agent,
10-60 turns, 300-3,000 tokens added per turn (user text and tool results), answers of
100-600 tokens. Each turn is decided by the real engine (:class:`router.engine.Router`) and,
for the session-aware policies, the gateway's session tracking (:class:`gateway.sessions.Sessions`,
in process). Three backends stand for the usual mix, each billed as its provider bills a
prefix cache: ``strong`` as Anthropic (cache reads at 0.1x input, writes at 1.25x), ``mid``
as OpenAI (reads at 0.25x, writes at the input price), ``local`` a self-hosted vLLM pool
(reads at 0.2x of its GPU-derived input price).

Cache state per backend and conversation: the longest prompt it was last sent (plus its
answer), and each agent's system prompt once seen (kept warm by the agent's other sessions).
The cached tokens of a call are the longest of those that the new prompt starts with; the
rest is prefilled and written. Time is simulated: turns are separated by gaps drawn per
profile (``agent``: model and tool time; ``chat``: a person reading and typing), and a hosted
backend's copy of a conversation lives :data:`router.live.PREFIX_TTL_S` after its last use
(Anthropic's default 5-minute lifetime, refreshed on each hit; OpenAI keeps prefixes 5-10
minutes idle). The local pool's copies never expire (its LRU eviction under many concurrent
sessions is not modelled), which favours per-request routing. The engine sees the same
ages (the session state's timestamps are set from the simulated clock before each decision).
TTFT is a prefill model: a base latency plus uncached tokens over the backend's prefill rate.

Turn difficulty varies (Beta(0.6, 1.6)), independently per turn: the predictor gives
``strong`` 0.9 on every turn, ``mid`` and ``local`` less as turns get harder, so per-request
routing moves a conversation between models whenever a turn's difficulty crosses a bar, and
pays the part of the prefix the new backend does not hold.

Policies, side by side on the same conversations: ``per_request`` (sessions off),
``session`` (the default session block), ``session_downgrade`` (``allow_downgrade: true``),
``always_strongest``, ``always_cheapest``. Printed per profile and policy: USD per session
(mean), cached share of input tokens after the second turn, switches per session (median),
TTFT p50/p99 (s), the share of turns whose chosen model's predicted quality clears the bar
of the full route (0.9 x the best of the three), and the share of turns on ``strong``.
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

from gateway.sessions import Sessions
from backends.pricing import cost_usd
from router.engine import Router, RoutingRequest
from router.policy import parse_policy
from router.live import PREFIX_TTL_S
from router.predict import Prediction

BACKENDS = """backends:
  - {name: strong, kind: fake, model: strong, quality: 0.9,
     pricing: {input_per_1m: 3.0, output_per_1m: 15.0, cached_input_per_1m: 0.3, cache_write_input_per_1m: 3.75}}
  - {name: mid, kind: fake, model: mid, quality: 0.8,
     pricing: {input_per_1m: 0.4, output_per_1m: 1.6, cached_input_per_1m: 0.1}}
  - {name: local, kind: fake, model: local, quality: 0.7,
     pricing: {input_per_1m: 0.05, output_per_1m: 0.08, cached_input_per_1m: 0.01}}
"""
BAR = "{target: 0.9}"
POLICIES = {
    "per_request": f"  - {{name: auto, backends: [strong, mid, local], quality_bar: {BAR}, session: {{enabled: false}}}}",
    "session": f"  - {{name: auto, backends: [strong, mid, local], quality_bar: {BAR}}}",
    "session_downgrade": f"  - {{name: auto, backends: [strong, mid, local], quality_bar: {BAR}, "
                         "session: {allow_downgrade: true}}",
    "always_strongest": f"  - {{name: auto, backends: [strong], quality_bar: {BAR}, session: {{enabled: false}}}}",
    "always_cheapest": f"  - {{name: auto, backends: [local], quality_bar: {BAR}, session: {{enabled: false}}}}",
}
#: (base TTFT in seconds, prefill tokens per second) per backend.
PREFILL = {"strong": (0.35, 12_000.0), "mid": (0.25, 20_000.0), "local": (0.05, 8_000.0)}
WORKLOAD = {"agents": 3, "system_tokens": (5_000, 20_000), "turns": (10, 60), "added_tokens": (300, 3_000),
            "answer_tokens": (100, 600), "difficulty": "Beta(0.6, 1.6) per turn", "cache_ttl_s": PREFIX_TTL_S}
#: Seconds between two turns of a conversation (uniform), per profile.
PROFILES = {"agent": (3.0, 60.0), "chat": (20.0, 600.0)}
#: Backends whose copy of a conversation expires after PREFIX_TTL_S idle (hosted providers).
EXPIRES = {"strong", "mid"}


def _text(rng: random.Random, tokens: int) -> str:
    # chars/4 is the engine's token estimate (backends.openai_shapes.estimate_tokens): 4-char words.
    return " ".join(f"{rng.randrange(36 ** 3):03x}" for _ in range(tokens))


class TurnPredictor:
    """Per-turn quality: the turn's difficulty ``d`` (set before each decision) lowers the
    weaker models' chance of a good answer."""

    difficulty = 0.0

    async def predict(self, text, backends):
        d = self.difficulty
        quality = {"strong": 0.9, "mid": 0.86 - 0.35 * d, "local": 0.84 - 0.7 * d}
        return Prediction(quality={b.name: quality[b.name] for b in backends}, output_tokens=350, source="bench")


@dataclass(frozen=True)
class _Named:
    name: str


_ALL = [_Named(b) for b in ("strong", "mid", "local")]


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


def _conversations(n: int, seed: int, gaps: tuple[float, float]) -> list[dict]:
    rng = random.Random(seed)
    systems = [_text(rng, rng.randint(*WORKLOAD["system_tokens"])) for _ in range(WORKLOAD["agents"])]
    out = []
    for i in range(n):
        turns = rng.randint(*WORKLOAD["turns"])
        out.append({"system": systems[i % len(systems)], "agent": i % len(systems),
                    "added": [_text(rng, rng.randint(*WORKLOAD["added_tokens"])) for _ in range(turns)],
                    "answers": [_text(rng, rng.randint(*WORKLOAD["answer_tokens"])) for _ in range(turns)],
                    "difficulty": [rng.betavariate(0.6, 1.6) for _ in range(turns)],
                    "gaps": [rng.uniform(*gaps) for _ in range(turns)]})
    return out


def _age_session(state, at: dict[str, float], now: float) -> None:
    """Set the session's cache timestamps (real time) to the simulated ages of its copies."""
    real = time.time()
    for backend, held in state.held.items():
        if backend in at:
            held[1] = real - (now - at[backend]) if backend in EXPIRES else real


async def run_policy(name: str, conversations: list[dict]) -> Totals:
    predictor = TurnPredictor()
    router = Router(parse_policy(f"version: 1\n{BACKENDS}routes:\n{POLICIES[name]}\n"), predictor=predictor)
    sessions = Sessions()
    totals = Totals()
    seen_system: dict[str, set[int]] = {b: set() for b in PREFILL}
    for conv in conversations:
        messages = [{"role": "system", "content": conv["system"]}]
        held: dict[str, int] = {}  # backend -> tokens of this conversation it holds in cache
        at: dict[str, float] = {}  # backend -> simulated time it last read or wrote them
        usd, switches, last, now = 0.0, 0, None, 0.0
        system_tokens = len(conv["system"]) // 4
        for turn, (added, answer, d, gap) in enumerate(zip(conv["added"], conv["answers"], conv["difficulty"],
                                                            conv["gaps"])):
            now += gap
            messages.append({"role": "user", "content": added})
            body = {"model": "auto", "messages": messages}
            ticket = await sessions.open(router, None, {}, body)
            if ticket is not None:
                _age_session(ticket.state, at, now)
            predictor.difficulty = d
            decision = await router.decide(RoutingRequest("chat", body, session=ticket.state if ticket else None))
            backend = decision.record.chosen
            tokens_in = sum(len(m["content"]) // 4 + 1 for m in messages)
            alive = backend not in EXPIRES or now - at.get(backend, now) <= PREFIX_TTL_S
            cached = max(held.get(backend, 0) if alive else 0,
                         system_tokens if conv["agent"] in seen_system[backend] else 0)
            cached = min(cached, tokens_in)
            tokens_out = len(answer) // 4 + 1
            pricing = router.pricing[backend]
            usd += cost_usd(pricing, tokens_in, tokens_out, cached, tokens_in - cached)
            base, rate = PREFILL[backend]
            totals.ttft.append(base + (tokens_in - cached) / rate)
            if turn >= 2:
                totals.input_tokens += tokens_in
                totals.cached_tokens += cached
            full = (await predictor.predict("", _ALL)).quality
            totals.turns += 1
            totals.used[backend] += 1
            totals.cleared += full[backend] + 1e-9 >= 0.9 * max(full.values())
            switches += last is not None and backend != last
            last = backend
            held[backend], at[backend] = tokens_in + tokens_out, now
            seen_system[backend].add(conv["agent"])
            if decision.record.prefix_hash:
                router.live.saw_prefix(backend, decision.record.prefix_hash)
            if ticket is not None:
                await sessions.close(ticket, backend, True, tokens_in, tokens_out=tokens_out)
            messages.append({"role": "assistant", "content": answer})
        totals.usd.append(usd)
        totals.switches.append(switches)
    return totals


def _row(name: str, t: Totals) -> dict:
    q = statistics.quantiles(t.ttft, n=100)
    return {"policy": name, "usd_per_session": statistics.fmean(t.usd),
            "cached_share_after_turn_2": t.cached_tokens / max(1, t.input_tokens),
            "switches_median": statistics.median(t.switches), "ttft_p50_s": statistics.median(t.ttft),
            "ttft_p99_s": q[98], "bar_cleared_share": t.cleared / max(1, t.turns),
            "strong_share": t.used["strong"] / max(1, t.turns)}


async def run(n: int, seed: int, profile: str) -> list[dict]:
    conversations = _conversations(n, seed, PROFILES[profile])
    return [{"profile": profile, **_row(name, await run_policy(name, conversations))} for name in POLICIES]


def _print(rows: list[dict]) -> None:
    print(f"{'policy':<18}{'USD/session':>12}{'cached':>9}{'switches':>10}{'TTFT p50':>10}{'TTFT p99':>10}"
          f"{'bar held':>10}{'strong':>8}")
    for r in rows:
        print(f"{r['policy']:<18}{r['usd_per_session']:>12.4f}{r['cached_share_after_turn_2']:>9.1%}"
              f"{r['switches_median']:>10.1f}{r['ttft_p50_s']:>10.2f}{r['ttft_p99_s']:>10.2f}"
              f"{r['bar_cleared_share']:>10.1%}{r['strong_share']:>8.1%}")
    base = next(r for r in rows if r["policy"] == "per_request")["usd_per_session"]
    for name in ("session", "session_downgrade"):
        cost = next(r for r in rows if r["policy"] == name)["usd_per_session"]
        print(f"{name} / per_request cost: {cost / base:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", choices=[*PROFILES, "all"], default="all")
    parser.add_argument("--json", default=None, help="also write the rows and the workload to this file")
    args = parser.parse_args()
    print(f"workload: {args.sessions} sessions, seed {args.seed}, bar {BAR}, {json.dumps(WORKLOAD)}")
    rows = []
    for profile in PROFILES if args.profile == "all" else [args.profile]:
        found = asyncio.run(run(args.sessions, args.seed, profile))
        print(f"\nprofile {profile}: {PROFILES[profile][0]:g}-{PROFILES[profile][1]:g} s between turns")
        _print(found)
        rows += found
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"workload": WORKLOAD, "profiles": PROFILES, "sessions": args.sessions, "seed": args.seed,
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
