"""The session benchmark's world (:mod:`bench.sessions`): prices and bills, the backends'
prefix caches, the turns' difficulty and the quality each model reaches on them.

One price table serves both sides: the engine's policy (:func:`backends_yaml`) and the bill
of every turn (:func:`bill`), so the router is priced exactly as it is billed.

Billing, per provider (their pricing pages and prompt-caching guides):

- ``anthropic``: a prompt's uncached tokens are written to the cache at 1.25x the input
  price (5-minute cache, the agent's breakpoint at the end of its prompt), cached tokens are
  read at 0.1x. ``strong`` is priced as Claude Sonnet 4.5 (3 / 15 USD per million, reads 0.30,
  writes 3.75), ``mid`` as Claude Haiku 4.5 (1 / 5, reads 0.10, writes 1.25).
- ``openai``: caching is automatic and free to write; cached tokens are read at 0.25x
  (the GPT-4.1 family). ``strong`` is priced as GPT-4.1 (2 / 8, reads 0.50), ``mid`` as
  GPT-4.1 mini (0.4 / 1.6, reads 0.10).
- ``local`` (both tables): a self-hosted vLLM pool priced by GPU time (0.05 / 0.08 USD per
  million); a prefix-cache hit skips the prefill, billed at 0.2x of the input price, and
  nothing is charged for writing.

A hosted provider keeps a conversation's prefix :data:`router.live.PREFIX_TTL_S` after its
last use (Anthropic's 5 minutes, refreshed by each hit; OpenAI's 5-10 idle minutes). The
local pool's copy is evicted after ``local_ttl_s`` without a hit: vLLM's prefix cache is an
LRU over the pool's KV memory, and under many concurrent sessions an idle conversation's
blocks are the first to go (``None``: never evicted). The engine does not know the pool's
eviction: it assumes every backend keeps a prefix for ``PREFIX_TTL_S``. An agent's system
prompt, shared by all its sessions, stays warm on every backend that has served it (its
other sessions keep it hot).

The cost floor (:meth:`Caches.floor`): each turn on the cheapest backend that clears the bar,
reading the whole conversation so far from its cache where the time since the last turn is
within that backend's cache lifetime (and the agent's system prompt in any case). No policy
that holds the bar on every turn pays less: a backend's copy of the conversation is at most
what it was sent on the last turn, at least as old as the gap since then, and a cached read
never costs more than an uncached token. The floor over per-request routing is therefore the
best cost ratio any session policy can reach on a workload.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from backends.config import Pricing
from backends.pricing import cost_usd
from router.live import PREFIX_TTL_S
from router.predict import Prediction

BACKENDS = ("strong", "mid", "local")
#: Backend -> prior quality written into the policy (the predictor decides every turn).
QUALITY = {"strong": 0.9, "mid": 0.8, "local": 0.7}
LOCAL = {"input_per_1m": 0.05, "output_per_1m": 0.08, "cached_input_per_1m": 0.01}
PRICES: dict[str, dict[str, dict[str, float]]] = {
    "anthropic": {"strong": {"input_per_1m": 3.0, "output_per_1m": 15.0, "cached_input_per_1m": 0.3,
                             "cache_write_input_per_1m": 3.75},
                  "mid": {"input_per_1m": 1.0, "output_per_1m": 5.0, "cached_input_per_1m": 0.1,
                          "cache_write_input_per_1m": 1.25},
                  "local": LOCAL},
    "openai": {"strong": {"input_per_1m": 2.0, "output_per_1m": 8.0, "cached_input_per_1m": 0.5},
               "mid": {"input_per_1m": 0.4, "output_per_1m": 1.6, "cached_input_per_1m": 0.1},
               "local": LOCAL},
}
#: Backend -> (base TTFT in seconds, prefill tokens per second).
PREFILL = {"strong": (0.35, 12_000.0), "mid": (0.25, 20_000.0), "local": (0.05, 8_000.0)}
#: Turn difficulty: drawn per turn, or once per conversation for all its turns.
DIFFICULTY = {"turn": "Beta(0.6, 1.6) per turn", "session": "Beta(0.6, 1.6) per conversation, shared by its turns"}
#: The route's bar: a share of the best predicted quality of the turn.
TARGET = 0.9


def backends_yaml(prices: str) -> str:
    """The policy's ``backends:`` block for a price table (flow style, one line per backend)."""
    lines = ["backends:"]
    for name in BACKENDS:
        pricing = ", ".join(f"{k}: {v}" for k, v in PRICES[prices][name].items())
        lines.append(f"  - {{name: {name}, kind: fake, model: {name}, quality: {QUALITY[name]}, "
                     f"pricing: {{{pricing}}}}}")
    return "\n".join(lines) + "\n"


def pricing(prices: str, backend: str) -> Pricing:
    return Pricing(**PRICES[prices][backend])


def bill(prices: str, backend: str, tokens_in: int, tokens_out: int, cached: int) -> float:
    """USD of one turn: cached tokens read, the rest written (at the write price where the
    provider charges one, else the input price), the answer at the output price."""
    return cost_usd(pricing(prices, backend), tokens_in, tokens_out, cached, tokens_in - cached)


def quality(d: float) -> dict[str, float]:
    """Each model's predicted quality on a turn of difficulty ``d`` (0 easy, 1 hard):
    ``strong`` holds, the weaker models fall as turns get harder."""
    return {"strong": 0.9, "mid": 0.86 - 0.35 * d, "local": 0.84 - 0.7 * d}


def clears(d: float) -> list[str]:
    """The backends that clear the bar on a turn of difficulty ``d``."""
    q = quality(d)
    bar = TARGET * max(q.values())
    return [b for b in BACKENDS if q[b] + 1e-9 >= bar]


class TurnPredictor:
    """The engine's predictor: :func:`quality` of the turn's difficulty (set before each decision)."""

    difficulty = 0.0

    async def predict(self, text, backends):
        q = quality(self.difficulty)
        return Prediction(quality={b.name: q[b.name] for b in backends}, output_tokens=350, source="bench")


def difficulties(rng: random.Random, turns: int, mode: str) -> list[float]:
    if mode == "session":
        return [rng.betavariate(0.6, 1.6)] * turns
    return [rng.betavariate(0.6, 1.6) for _ in range(turns)]


@dataclass
class Caches:
    """One conversation's copies in the backends' prefix caches.

    Attributes:
        prices: the price table's name (:data:`PRICES`).
        system_tokens: the agent's system prompt (tokens); ``system_warm``: the backends
            already holding it (kept warm by the agent's other sessions).
        local_ttl_s: seconds without a hit after which the local pool evicts the copy.
        held: backend -> (tokens of the conversation it holds, simulated time of its last use).
    """

    prices: str
    system_tokens: int
    system_warm: set[str]
    local_ttl_s: float | None = 60.0
    held: dict[str, tuple[int, float]] = field(default_factory=dict)

    def ttl(self, backend: str) -> float | None:
        return self.local_ttl_s if backend == "local" else PREFIX_TTL_S

    def cached(self, backend: str, tokens_in: int, now: float) -> int:
        """Prompt tokens ``backend`` reads from its cache for a prompt of ``tokens_in`` at ``now``."""
        tokens, at = self.held.get(backend, (0, now))
        ttl = self.ttl(backend)
        alive = tokens if ttl is None or now - at <= ttl else 0
        return min(tokens_in, max(alive, self.system_tokens if backend in self.system_warm else 0))

    def serve(self, backend: str, tokens_in: int, tokens_out: int, now: float) -> tuple[float, int]:
        """Bill a turn on ``backend`` and leave the prompt and its answer in its cache:
        ``(usd, cached tokens)``."""
        cached = self.cached(backend, tokens_in, now)
        self.held[backend] = (tokens_in + tokens_out, now)
        self.system_warm.add(backend)
        return bill(self.prices, backend, tokens_in, tokens_out, cached), cached

    def floor(self, d: float, tokens_in: int, tokens_out: int, before: int, gap: float) -> tuple[float, str]:
        """The turn's floor (module docstring): the cheapest bar-clearing backend reading the
        ``before`` tokens of the conversation (last prompt and answer) from its cache, unless
        the ``gap`` since the last turn outlived its cache (every backend's copy is at least
        that old); the system prompt is taken as warm everywhere."""
        def cached(b: str) -> int:
            ttl = self.ttl(b)
            return min(tokens_in, max(before if ttl is None or gap <= ttl else 0, self.system_tokens))
        return min((bill(self.prices, b, tokens_in, tokens_out, cached(b)), b) for b in clears(d))


def hindsight(prices: str, system_tokens: int, local_ttl_s: float | None,
              turns: list[tuple[int, int, float, float]]) -> tuple[float, int, list[str]]:
    """The cheapest way through one conversation that clears the bar on every turn, knowing
    every turn in advance: ``(usd, switches, backend per turn)``. ``turns``: per turn (prompt
    tokens, answer tokens, difficulty, seconds since the last turn).

    Dynamic programming over the cache state, the turn each backend last served (its copy:
    that turn's prompt and answer, alive within its lifetime), with the system prompt warm
    everywhere, as the floor has it. An online policy knows less and pays at least this; the
    floor is lower still, since it lets every backend hold the whole conversation."""
    caches = Caches(prices, system_tokens, set(BACKENDS), local_ttl_s)
    times, sizes, now = [], [], 0.0
    for tokens_in, tokens_out, _, gap in turns:
        now += gap
        times.append(now)
        sizes.append(tokens_in + tokens_out)
    # state: the turn each backend last served (-1: none) -> (usd, switches, path)
    states: dict[tuple[int, ...], tuple[float, int, tuple[str, ...]]] = {(-1,) * len(BACKENDS): (0.0, 0, ())}
    for t, (tokens_in, tokens_out, d, _gap) in enumerate(turns):
        nxt: dict[tuple[int, ...], tuple[float, int, tuple[str, ...]]] = {}
        for state, (usd, switches, path) in states.items():
            for b in clears(d):
                i = BACKENDS.index(b)
                last = state[i]
                caches.held = {b: (sizes[last], times[last])} if last >= 0 else {}
                cost = bill(prices, b, tokens_in, tokens_out, caches.cached(b, tokens_in, times[t]))
                key = state[:i] + (t,) + state[i + 1:]
                value = (usd + cost, switches + (bool(path) and path[-1] != b), path + (b,))
                if key not in nxt or value[0] < nxt[key][0]:
                    nxt[key] = value
        states = nxt
    usd, switches, path = min(states.values(), key=lambda v: v[0])
    return usd, switches, list(path)
