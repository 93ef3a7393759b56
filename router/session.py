"""Sessions: a conversation routed as a whole.

An agent or a chat sends many requests per conversation, each repeating a growing prefix
(system prompt, tools, every earlier turn). The backend that served the last turn holds that
prefix in its prefix cache; another backend must prefill it again at its full input price
(plus its cache-write price where the provider charges one) and with a cold TTFT. The engine
therefore prices each candidate with its real cache state (:func:`price_turn`) and keeps the
session where it is unless moving pays (:func:`weigh`):

- its model no longer clears the bar: the session moves (escalation) to the bar-clearing
  candidate that costs least over the expected rest of the session; a rule that leaves its
  model out moves it to the normal choice;
- another bar-clearing candidate costs less over the expected rest of the session, its
  prefix paid again on the first turn there (:func:`over_rest`): the session moves only
  under ``allow_downgrade`` and within ``max_switches``. The rest is estimated as as many turns as the session has
  had (the "Copernican" estimate: with no other knowledge, an observed lifetime is as likely
  to be in its first half as its second; Gott, Nature 363, 1993).

State lives in a :class:`SessionStore`: in process here (bounded, idle sessions expire), in
Redis for several gateway replicas (:mod:`gateway.sessions`).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Protocol

from backends.config import Pricing
from backends.openai_shapes import estimate_tokens
from backends.pricing import cost_usd
from router.live import PREFIX_TTL_S

if TYPE_CHECKING:  # router.decision imports this module for SessionState
    from router.decision import Candidate
    from router.policy.models import RouteConfig

#: Most sessions an in-process store keeps (least recently used dropped first).
MAX_SESSIONS = 100_000


@dataclass
class SessionState:
    """What is known of one live session.

    Attributes:
        id: the session id (tenant-scoped by the store's key, never shared across tenants).
        backend: the backend that answered its last turn (``None``: no turn answered yet).
        turns: turns answered.
        switches: moves made for price or quality.
        prefix_tokens: tokens the backend has cached for it: the last turn's prompt plus its
            answer (tokens, estimated).
        held: backend -> ``[tokens, time]``: the prefix each backend the session visited was
            last sent (prompt plus answer, tokens) and when (``time.time()``); a backend it left
            may still hold an older part of the conversation within its cache's lifetime.
        replica: the vLLM replica that answered its last turn, if any.
        last_seen: time of the last turn (``time.time()``, seconds).
        explicit: the client named the session (header or body field) rather than the gateway
            finding it by prefix lineage.
    """

    id: str
    backend: str | None = None
    turns: int = 0
    switches: int = 0
    prefix_tokens: int = 0
    held: dict[str, list[float]] = field(default_factory=dict)
    replica: str | None = None
    last_seen: float = field(default_factory=time.time)
    explicit: bool = True

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "SessionState":
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


class SessionStore(Protocol):
    """Where sessions live. Keys are already tenant- and route-scoped by the caller."""

    async def get(self, key: str, idle_s: float) -> SessionState | None: ...

    async def put(self, key: str, state: SessionState, idle_s: float) -> None: ...

    async def find_lineage(self, keys: list[str], idle_s: float) -> str | None: ...

    async def add_lineage(self, key: str, session_key: str, idle_s: float) -> None: ...

    def live(self) -> int: ...


class InProcessSessions:
    """A bounded in-process store (one gateway process): past ``max_sessions`` the least
    recently used session is dropped, and sessions idle for longer than their route's
    ``idle_s`` are dropped as soon as a write finds them at the old end of the order (so an
    idle process holds no more than it held at its last write, and never more than the cap).

    Why not a library cache: the expiry is per entry (each route has its own ``idle_s``) and
    the store is read and written only from the event loop, so an ordered dict with
    deadlines is all it takes (cachetools' TTLCache has one TTL per cache).
    """

    def __init__(self, max_sessions: int = MAX_SESSIONS):
        self.max = max_sessions
        self._s: OrderedDict[str, tuple[SessionState, float]] = OrderedDict()  # key -> (state, deadline)
        self._lineage: OrderedDict[str, tuple[str, float]] = OrderedDict()  # key -> (session key, deadline)

    async def get(self, key: str, idle_s: float) -> SessionState | None:
        found = self._s.get(key)
        if found is None:
            return None
        if time.time() > found[1]:
            del self._s[key]
            return None
        self._s.move_to_end(key)
        return SessionState.from_dict(found[0].to_dict())  # a copy: callers may change theirs

    async def put(self, key: str, state: SessionState, idle_s: float) -> None:
        self._s[key] = (state, time.time() + idle_s)
        self._s.move_to_end(key)
        _trim(self._s, self.max)

    async def find_lineage(self, keys: list[str], idle_s: float) -> str | None:
        now = time.time()
        for k in keys:
            hit = self._lineage.get(k)
            if hit is not None and now <= hit[1]:
                return hit[0]
        return None

    async def add_lineage(self, key: str, session_key: str, idle_s: float) -> None:
        self._lineage[key] = (session_key, time.time() + idle_s)
        self._lineage.move_to_end(key)
        _trim(self._lineage, self.max)

    def live(self) -> int:
        """Sessions held and not idle past their route's ``idle_s``."""
        now = time.time()
        return sum(1 for _, deadline in self._s.values() if deadline >= now)


def _trim(entries: OrderedDict, cap: int) -> None:
    """Drop expired entries from the least recently used end, then any over ``cap``."""
    now = time.time()
    while entries:
        oldest = next(iter(entries.values()))
        if oldest[1] >= now and len(entries) <= cap:
            break
        entries.popitem(last=False)


@dataclass
class SwitchPricing:
    """Both sides of a weighed switch (USD per turn; recorded in the decision's signals)."""

    on: str | None
    stay_usd: float | None
    stay_warm_usd: float | None = None
    move_to: str | None = None
    move_usd: float | None = None
    move_warm_usd: float | None = None
    expected_rest: int = 1
    verdict: str = "stay"
    #: A first turn's normal choice (the turn's cheapest), priced by ``stay_usd`` and
    #: ``stay_warm_usd``, when the session opens elsewhere (``verdict: open``).
    instead_of: str | None = None

    def to_dict(self) -> dict:
        return {k: (round(v, 10) if isinstance(v, float) else v) for k, v in asdict(self).items()
                if k != "instead_of" or v is not None}


def cached_tokens_of(state: SessionState | None, backend: str, tokens_in: int, now: float | None = None) -> int:
    """Prompt tokens ``backend`` is expected to read from its cache for this session's next
    turn: the prefix it was last sent for the session, while within the cache lifetime
    (:data:`router.live.PREFIX_TTL_S`), else none."""
    if state is None:
        return 0
    held = state.held.get(backend)
    if held is None:
        return max(0, min(tokens_in, state.prefix_tokens)) if state.backend == backend else 0
    tokens, at = held
    if (now if now is not None else time.time()) - at > PREFIX_TTL_S:
        return 0
    return max(0, min(tokens_in, int(tokens)))


def expected_rest(state: SessionState) -> int:
    """Turns the session is expected to go on for (this one included): as many as it has had,
    between 1 and 50 (module docstring)."""
    return max(1, min(50, state.turns))


def weigh(stay_usd: float, move_usd: float, move_warm_usd: float, rest: int,
          stay_warm_usd: float | None = None) -> bool:
    """Whether moving pays over ``rest`` turns: the first turn elsewhere pays the prefix
    cold (``move_usd``), later ones read it warm (``move_warm_usd``), against this turn on
    the current backend (``stay_usd``) and ``rest - 1`` later ones there (``stay_warm_usd``,
    default ``stay_usd``). Both sides are warm after this turn: a current backend whose copy
    expired pays it again once, as the other would."""
    stay_warm = stay_usd if stay_warm_usd is None else stay_warm_usd
    return move_usd + (rest - 1) * move_warm_usd < stay_usd + (rest - 1) * stay_warm


def answered_tokens(tokens_in: int, text_out: str = "", tokens_out: int | None = None) -> int:
    """The prefix a backend holds after a turn: its prompt plus its answer (tokens)."""
    return tokens_in + (tokens_out if tokens_out is not None else estimate_tokens(text_out))


def over_rest(candidate: Candidate, prefix: int, tokens_in: int, pricing: Mapping[str, Pricing],
              rest: int) -> tuple[float, float]:
    """``(usd, warm_usd)``: what ``candidate`` costs over ``rest`` turns of the session, and a
    later turn there. This turn is its scored cost (the prefix it does not hold prefilled and
    written at its prices); each later turn reads ``prefix`` tokens of the conversation from
    its cache and writes the rest of a prompt of this turn's size."""
    warm = min(tokens_in, prefix)
    warm_usd = cost_usd(pricing[candidate.backend], tokens_in, candidate.expected_output_tokens, warm, tokens_in - warm)
    return candidate.expected_cost_usd + (rest - 1) * warm_usd, warm_usd


def keep_session(route: RouteConfig, state: SessionState, candidates: list[Candidate], chosen: Candidate,
                 reason: str, tokens_in: int, pricing: Mapping[str, Pricing]) -> tuple[Candidate, str, SwitchPricing]:
    """Keep the session on its backend unless moving pays (module docstring):
    ``(chosen, reason, switch)``, where ``switch`` holds both sides of the weighed switch.

    A move goes to the bar-clearing candidate that costs least over the expected rest of the
    session (:func:`over_rest`), which need not be the turn's cheapest: a provider that bills
    a cache write (Anthropic, 1.25x) and cheap reads (0.1x) costs more on the turn it arrives
    and less on every turn after than one that bills the input price each time.

    Args:
        route: the route decided for (its ``session`` block).
        state: the session, on ``state.backend`` (not ``None``).
        candidates: the scored candidates, bar and SLO applied; chosen: the engine's
            choice among them, with its ``reason``.
        tokens_in: the request's prompt tokens (estimated).
        pricing: backend name -> its prices, for the later turns' warm price.
    """
    rest = expected_rest(state)
    stay = next((c for c in candidates if c.backend == state.backend), None)
    if stay is None:  # a rule, a cost limit or the context window left its backend out
        return chosen, reason, SwitchPricing(on=state.backend, stay_usd=None, move_to=chosen.backend,
                                             move_usd=chosen.expected_cost_usd, verdict="moved_by_rules")
    clearing = [c for c in candidates if c.eligible and c.meets_slo]
    priced = {c.backend: over_rest(c, state.prefix_tokens, tokens_in, pricing, rest) for c in [*clearing, chosen, stay]}
    switch = SwitchPricing(on=stay.backend, stay_usd=stay.expected_cost_usd, stay_warm_usd=priced[stay.backend][1],
                           expected_rest=rest)
    stays = stay.eligible and stay.meets_slo
    # The cheapest elsewhere over the rest; the engine's choice when nothing clears the bar
    # (its fallback under the route's on_no_candidate).
    best = min((c for c in clearing if c is not stay), key=lambda c: priced[c.backend][0],
               default=None if stays else chosen)
    if best is None or best is stay:
        return stay, "session_kept", switch
    switch.move_to, switch.move_usd = best.backend, best.expected_cost_usd
    switch.move_warm_usd = priced[best.backend][1]
    if not stays:
        # The bar is the route's promise: a turn its model cannot clear moves, whatever
        # the switches so far.
        switch.verdict = "escalate"
        return best, "session_escalated", switch
    capped = state.switches >= route.session.max_switches
    if route.session.allow_downgrade and not capped and weigh(
            stay.expected_cost_usd, best.expected_cost_usd, switch.move_warm_usd, rest, switch.stay_warm_usd):
        switch.verdict = "move"
        return best, "session_moved", switch
    switch.verdict = "stay"
    return stay, "session_kept", switch


def open_session(candidates: list[Candidate], chosen: Candidate, reason: str, tokens_in: int,
                 pricing: Mapping[str, Pricing],
                 expected_turns: float | None) -> tuple[Candidate, str, SwitchPricing | None]:
    """A session's first turn: ``(chosen, reason, switch)``. The engine's choice is the turn's
    cheapest above the bar; a session is expected to go on for as many turns as this route's
    sessions have had on average (``expected_turns``, from :class:`router.live.LiveState`;
    ``None`` before any), so it opens on the bar-clearing candidate that costs least over
    them: this turn writes its prompt to the cache, later turns read it (:func:`over_rest`).
    Where the route's traffic is mostly single requests the average is near one and the turn
    is decided alone. ``switch`` is ``None`` unless that moves the choice (``verdict: open``,
    ``instead_of`` the turn's cheapest)."""
    rest = max(1, min(50, round(expected_turns or 1)))
    clearing = [c for c in candidates if c.eligible and c.meets_slo]
    if rest <= 1 or chosen not in clearing:
        return chosen, reason, None
    # The turn's scored cost leaves cache writes out (backends.pricing: a lone request may not
    # be written); a session's first turn is, so each side pays its write here.
    first = {c.backend: cost_usd(pricing[c.backend], tokens_in, c.expected_output_tokens, c.expected_cached_tokens,
                                 tokens_in - c.expected_cached_tokens) for c in clearing}
    priced = {}
    for c in clearing:
        _, warm_usd = over_rest(c, tokens_in, tokens_in, pricing, rest)
        priced[c.backend] = (first[c.backend] + (rest - 1) * warm_usd, warm_usd)
    best = min(clearing, key=lambda c: priced[c.backend][0])
    if priced[best.backend][0] >= priced[chosen.backend][0]:
        return chosen, reason, None
    return best, "session_opened", SwitchPricing(
        on=None, stay_usd=first[chosen.backend], stay_warm_usd=priced[chosen.backend][1], move_to=best.backend,
        move_usd=first[best.backend], move_warm_usd=priced[best.backend][1], expected_rest=rest, verdict="open",
        instead_of=chosen.backend)


def session_signal(state: SessionState, switch: SwitchPricing | None) -> dict:
    """The decision's ``signals.session``: the session, its turn and the switch weighed."""
    out = {"id": state.id, "turn": state.turns + 1, "on": state.backend, "switches": state.switches,
           "explicit": state.explicit}
    if switch is not None:
        out["switch"] = switch.to_dict()
    return out
