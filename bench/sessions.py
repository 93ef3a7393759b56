"""Agent-session benchmark: per-request routing against session-aware routing.

Run: ``python -m bench.sessions [--sessions 40] [--seed 0] [--json out.json]``

Conversations shaped like coding and chat agents' (parameters printed with the results): a
system prompt with tool definitions of 5-20k tokens shared by the sessions of one agent,
10-60 turns, 300-3,000 tokens added per turn (user text and tool results), answers of
100-600 tokens. Each turn is decided by the real engine (:class:`router.engine.Router`) and,
for the session-aware policy, the gateway's session tracking (:class:`gateway.sessions.Sessions`,
in process). Three backends stand for the usual mix, each billed as its provider bills a
prefix cache: ``strong`` as Anthropic (cache reads at 0.1x input, writes at 1.25x), ``mid``
as OpenAI (reads at 0.25x, writes at the input price), ``local`` a self-hosted vLLM pool
(reads at 0.2x of its GPU-derived input price). A backend's cache holds, per session, the
longest prompt it was last sent (plus its answer) and each agent's system prompt once seen:
the cached tokens of a call are the longest of those that the new prompt starts with, the
rest is prefilled and written. Nothing expires (an agent's turns come seconds apart, well
within providers' 5-minute cache lifetime), which favours per-request routing: a backend it
returns to still holds the conversation up to where it left. TTFT is a prefill model: a base latency plus uncached tokens
over the backend's prefill rate.

Turn difficulty varies (Beta(0.6, 1.6)): the predictor gives ``strong`` 0.9 on every turn,
``mid`` and ``local`` less as turns get harder, so per-request routing moves a conversation
between models whenever a turn's difficulty crosses a bar, and pays its prefix again.

Policies, side by side on the same conversations: ``per_request`` (sessions off),
``session`` (the default session block), ``session_downgrade`` (``allow_downgrade: true``),
``always_strongest``, ``always_cheapest``. Printed
per policy: USD per session (mean), cached share of input tokens after the second turn,
switches per session (median), TTFT p50/p99 (s), and the share of turns whose chosen model's
predicted quality clears the bar of the full route (0.9 x the best of the three).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
from dataclasses import dataclass, field

from gateway.sessions import Sessions
from backends.pricing import cost_usd
from router.engine import Router, RoutingRequest
from router.policy import parse_policy
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
            "answer_tokens": (100, 600), "difficulty": "Beta(0.6, 1.6)"}


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
    input_tokens: int = 0
    cached_tokens: int = 0
    turns: int = 0
    cleared: int = 0


def _conversations(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    systems = [_text(rng, rng.randint(*WORKLOAD["system_tokens"])) for _ in range(WORKLOAD["agents"])]
    out = []
    for i in range(n):
        turns = rng.randint(*WORKLOAD["turns"])
        out.append({"system": systems[i % len(systems)], "agent": i % len(systems),
                    "added": [_text(rng, rng.randint(*WORKLOAD["added_tokens"])) for _ in range(turns)],
                    "answers": [_text(rng, rng.randint(*WORKLOAD["answer_tokens"])) for _ in range(turns)],
                    "difficulty": [rng.betavariate(0.6, 1.6) for _ in range(turns)]})
    return out


async def run_policy(name: str, conversations: list[dict]) -> Totals:
    predictor = TurnPredictor()
    router = Router(parse_policy(f"version: 1\n{BACKENDS}routes:\n{POLICIES[name]}\n"), predictor=predictor)
    sessions = Sessions()
    totals = Totals()
    seen_system: dict[str, set[int]] = {b: set() for b in PREFILL}
    for conv in conversations:
        messages = [{"role": "system", "content": conv["system"]}]
        held: dict[str, int] = {}  # backend -> tokens of this conversation it holds in cache
        usd, switches, last = 0.0, 0, None
        system_tokens = len(conv["system"]) // 4
        for turn, (added, answer, d) in enumerate(zip(conv["added"], conv["answers"], conv["difficulty"])):
            messages.append({"role": "user", "content": added})
            body = {"model": "auto", "messages": messages}
            ticket = await sessions.open(router, None, {}, body)
            predictor.difficulty = d
            decision = await router.decide(RoutingRequest("chat", body, session=ticket.state if ticket else None))
            backend = decision.record.chosen
            tokens_in = sum(len(m["content"]) // 4 + 1 for m in messages)
            cached = max(held.get(backend, 0), system_tokens if conv["agent"] in seen_system[backend] else 0)
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
            totals.cleared += full[backend] + 1e-9 >= 0.9 * max(full.values())
            switches += last is not None and backend != last
            last = backend
            held[backend] = tokens_in + tokens_out
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
            "ttft_p99_s": q[98], "bar_cleared_share": t.cleared / max(1, t.turns)}


async def run(n: int, seed: int) -> list[dict]:
    conversations = _conversations(n, seed)
    return [_row(name, await run_policy(name, conversations)) for name in POLICIES]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None, help="also write the rows and the workload to this file")
    args = parser.parse_args()
    rows = asyncio.run(run(args.sessions, args.seed))
    print(f"workload: {args.sessions} sessions, seed {args.seed}, bar {BAR}, {json.dumps(WORKLOAD)}")
    print(f"{'policy':<18}{'USD/session':>12}{'cached':>9}{'switches':>10}{'TTFT p50':>10}{'TTFT p99':>10}{'bar held':>10}")
    for r in rows:
        print(f"{r['policy']:<18}{r['usd_per_session']:>12.4f}{r['cached_share_after_turn_2']:>9.1%}"
              f"{r['switches_median']:>10.1f}{r['ttft_p50_s']:>10.2f}{r['ttft_p99_s']:>10.2f}{r['bar_cleared_share']:>10.1%}")
    base = next(r for r in rows if r["policy"] == "per_request")["usd_per_session"]
    sess = next(r for r in rows if r["policy"] == "session")["usd_per_session"]
    print(f"session / per_request cost: {sess / base:.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"workload": WORKLOAD, "sessions": args.sessions, "seed": args.seed, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
