"""Prefix-affinity replica choice: send a request to the replica most likely to hold the
longest prefix of its prompt in its prefix cache, unless that replica is overloaded.

**Sessions first.** A call whose :class:`~backends.call.CallContext` names a session goes
to the replica the session is on while that replica is healthy and acceptable by step 2
(reason ``session``): the replica of its last answered turn as the gateway's shared session
state remembers it (``session_replica``, so every gateway replica agrees), else the one this
chooser last picked for it. A conversation's prefix is on that replica even where the
steps below would not find it (a prompt shorter than a block, a block table that another
gateway's traffic evicted). When that replica is ejected or overloaded the session moves by
the steps below, and stays on its new replica from then on.

For a request with block hashes ``h_1..h_n`` (:mod:`backends.vllm.blocks`):

1. **Preference order.** (a) The replicas that received the deepest block ``h_i`` found in
   the gateway's block table (an LRU map block hash -> the last ``holders`` replicas that
   received it, most recent first, updated with every request's blocks; a longer match
   means more cached prefill), provided the match covers at least ``match_threshold`` of
   the prompt's blocks (SGLang's cache-aware router uses the same rule, default 0.5): a
   match on a short shared preamble ("You are a helpful assistant. Current time:
   [timestamp-1]") would otherwise pull every new prompt to one replica. Every replica
   holding a matching block is ranked by its deepest match, then by recency: when the
   best holder is overloaded (step 2), the request goes to the next replica that holds
   the prefix (e.g. where an earlier spill sent it) rather than to one that does not.
   (b) Then every replica in
   rendezvous-hashing order (highest random weight, Thaler & Ravishankar 1998) of the key
   ``h_k``, ``k = min(n, hrw_blocks)``: requests that share their first ``k`` blocks (a
   system prompt) agree on a replica even across gateway processes that do not share the
   table, and removing a replica only moves its own keys. With ``balance_new`` (default),
   a prefix the table has never seen goes first to the replica owning the fewest blocks
   in the table (rendezvous order breaks ties), as SGLang's cache-aware router balances
   new prefixes by cache size: rendezvous alone spreads tenants unevenly (binomially), and
   the most loaded replica then evicts its own tenants' prefixes.
2. **Bounded load** (consistent hashing with bounded loads, Mirrokni, Thorup & Zadimoghaddam
   2018): a replica is acceptable while its in-flight count (all gateways', see
   :attr:`backends.vllm.pool.Replica.load`) is below
   ``max(min_bound, ceil(load_factor * (total in flight + 1) / replicas))`` and its scraped
   queue (``vllm:num_requests_waiting``) is at most ``queue_threshold``. The first
   acceptable replica in preference order wins.
3. **Fallback**: when none is acceptable, or the prompt is shorter than one block (nothing
   a prefix cache could hold), the least-loaded replica
   (:class:`backends.vllm.pool.LeastLoadedChooser`).

**Capacity-aware mode** (``cache_model``, default on; active while every replica's cache
capacity is known: scraped ``vllm:cache_config_info`` or the ``cache_blocks`` option):
step 1 reads the gateway's model of each replica's LRU cache
(:mod:`backends.vllm.cachemodel`) instead of the table: (a) the replicas modelled to hold
the longest leading run of the prompt's blocks (at least ``match_threshold`` of them), by
depth, then by how recently they received it; a prefix that other traffic has pushed out
of every cache goes back to the replica the table remembers (as without the model); (b)
then replicas still holding at least ``hrw_blocks`` leading blocks of a partly evicted
prefix, deepest first; (c) then, for a prefix the table does not know, the replica whose
cache turns over slowest (free room first, then the oldest least recently used block),
rendezvous order breaking ties; with ``balance_new`` off, rendezvous order. When the pool is near its
cache capacity this keeps tenants spread by what the caches can hold rather than by how
many blocks each replica was ever sent (`python -m bench.prefix_holders_ab --variants
cache_model=0 cache_model=1`, docs/PREFIX_CACHE.md).
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter, OrderedDict
from collections.abc import Sequence

from backends.call import NO_CONTEXT, CallContext
from backends.vllm.blocks import BLOCK_TOKENS, block_hashes, prompt_text
from backends.vllm.cachemodel import ReplicaCaches
from backends.vllm.pool import LeastLoadedChooser, Replica


class AffinityChooser:
    """Prefix-affinity chooser; see the module docstring.

    Args:
        block_tokens: tokens per hashed block (vLLM's default block size is 16).
        hrw_blocks: blocks forming the rendezvous key.
        table_blocks: block hashes remembered (LRU); 200k blocks of 16 tokens ~ 3.2M tokens.
        load_factor: bounded-load factor c (>= 1).
        min_bound: in-flight count always acceptable (continuous batching serves several
            sequences at once, so tiny pools should not spill at the second request).
        queue_threshold: scraped waiting requests above which the replica is skipped.
        balance_new: send never-seen prefixes to the replica owning the fewest table blocks.
        match_threshold: share of a prompt's blocks a table match must cover to be followed.
        holders: replicas remembered per block (most recent first).
        cache_model: model each replica's LRU cache when every capacity is known (module
            docstring, "Capacity-aware mode").
        cache_blocks: KV blocks of ``block_tokens`` tokens per replica, for replicas that do
            not report ``vllm:cache_config_info`` (``None``: only scraped capacities).
        sessions_kept: sessions whose replica this chooser remembers (least recently used
            forgotten first).

    Attributes:
        on_choice: called with ``(block hashes, replica url)`` after each choice
            (:mod:`backends.vllm.shared` publishes it to the other gateway replicas).
        reasons: how many choices were ``session``, ``prefix_match``, ``rendezvous`` (or
            balanced new prefix), ``overloaded_least_loaded`` or ``short_prompt``.
    """

    def __init__(self, *, block_tokens: int = BLOCK_TOKENS, hrw_blocks: int = 8, table_blocks: int = 200_000,
                 load_factor: float = 1.25, min_bound: int = 8, queue_threshold: float = 8,
                 balance_new: bool = True, match_threshold: float = 0.5, holders: int = 2,
                 cache_model: bool = True, cache_blocks: int | None = None, sessions_kept: int = 100_000):
        self.block_tokens = block_tokens
        self.hrw_blocks = hrw_blocks
        self.table_blocks = table_blocks
        self.load_factor = load_factor
        self.min_bound = min_bound
        self.queue_threshold = queue_threshold
        self.balance_new = balance_new
        self.match_threshold = match_threshold
        self.holders = max(1, holders)
        self.cache_model = cache_model
        self.cache_blocks = cache_blocks
        self.caches = ReplicaCaches(block_tokens)
        self.capacities: dict[str, int] = {}  # replica url -> modelled capacity (gateway blocks), once known
        self.table: OrderedDict[int, tuple[str, ...]] = OrderedDict()
        self.sessions: OrderedDict[str, str] = OrderedDict()  # session id -> replica url
        self.sessions_kept = sessions_kept
        self.owned: dict[str, int] = {}
        self.fallback = LeastLoadedChooser()
        self.last_reason = ""
        self.reasons: Counter[str] = Counter()
        self.on_choice = None  # callable(hashes, url): shares each choice with other gateways

    def choose(self, replicas: Sequence[Replica], body: dict, context: CallContext = NO_CONTEXT) -> Replica:
        hashes = block_hashes(body, self.block_tokens)
        if hashes:
            self._update_capacities(replicas)
        pick, self.last_reason = self._select(replicas, body, hashes, self.capacities, self.fallback.choose, context)
        self.reasons[self.last_reason] += 1
        if context.session_id is not None:
            self._keep_session(context.session_id, pick.base_url)
        if hashes:
            self.learn(hashes, pick.base_url)
            if self.on_choice is not None:
                self.on_choice(hashes, pick.base_url)
        return pick

    def preview(self, replicas: Sequence[Replica], body: dict,
                context: CallContext = NO_CONTEXT) -> tuple[Replica, str]:
        """The replica and reason :meth:`choose` would give ``body`` now, changing nothing:
        no :meth:`learn`, no ``reasons`` or ``last_reason``, no ``on_choice``, no stored
        capacity, and the least-loaded fallback's cursor stays (``POST /v1/route``)."""
        hashes = block_hashes(body, self.block_tokens)
        capacities = {**self.capacities, **self._scraped_capacities(replicas)} if hashes else self.capacities
        return self._select(replicas, body, hashes, capacities, self.fallback.peek, context)

    def _select(self, replicas: Sequence[Replica], body: dict, hashes: Sequence[int],
                capacities: dict[str, int], fallback, context: CallContext = NO_CONTEXT) -> tuple[Replica, str]:
        """The session's replica, then steps 2 and 3 of the module docstring over
        :meth:`preference`'s order; ``fallback`` is the least-loaded choice (``choose``, or
        ``peek`` for a preview)."""
        bound = max(self.min_bound, math.ceil(self.load_factor * (sum(r.load for r in replicas) + 1)
                                              / len(replicas)))
        held = self._session_replica(replicas, context)
        if held is not None and self._acceptable(held, bound):
            return held, "session"
        if not hashes:
            return fallback(replicas, body), "short_prompt"
        order, matched = self._ranked(replicas, hashes, capacities)
        for i, replica in enumerate(order):
            if self._acceptable(replica, bound):
                return replica, ("prefix_match" if i < matched else "rendezvous")
        return fallback(replicas, body), "overloaded_least_loaded"

    def _acceptable(self, replica: Replica, bound: int) -> bool:
        """Step 2: the replica's in-flight count is under ``bound`` and its scraped queue at
        most ``queue_threshold``."""
        return replica.load < bound and replica.queue <= self.queue_threshold

    def _session_replica(self, replicas: Sequence[Replica], context: CallContext) -> Replica | None:
        """The healthy replica among ``replicas`` that the call's session is on (module
        docstring, "Sessions first"), or ``None``."""
        if context.session_id is None:
            return None
        hint, url = context.session_replica, self.sessions.get(context.session_id)
        held = next((r for r in replicas if r.shown_url == hint), None) if hint is not None else None
        if held is None and url is not None:
            held = next((r for r in replicas if r.base_url == url), None)
        return held if held is not None and held.healthy else None

    def _keep_session(self, session_id: str, url: str) -> None:
        """Remember that ``session_id`` is on replica ``url`` (bounded: ``sessions_kept``)."""
        self.sessions[session_id] = url
        self.sessions.move_to_end(session_id)
        while len(self.sessions) > self.sessions_kept:
            self.sessions.popitem(last=False)

    def preference(self, replicas: Sequence[Replica], hashes: Sequence[int]) -> list[Replica]:
        """Replicas in preference order: those holding the deepest table match first (by
        depth, then recency), then rendezvous order (capacity-aware mode: the modelled
        caches decide, see the module docstring). Sets ``_matched`` to the number of
        prefix-holding replicas at the front."""
        order, self._matched = self._ranked(replicas, hashes, self.capacities)
        return order

    def _ranked(self, replicas: Sequence[Replica], hashes: Sequence[int],
                capacities: dict[str, int]) -> tuple[list[Replica], int]:
        """:meth:`preference`'s order and how many prefix-holding replicas lead it, with the
        modelled ``capacities`` given (reads the chooser's state, writes none)."""
        key = hashes[min(len(hashes), self.hrw_blocks) - 1].to_bytes(8, "big")
        order = sorted(replicas, key=lambda r: _weight(key, r.base_url), reverse=True)
        if self.cache_model and all(r.base_url in capacities for r in replicas):
            return self._modelled_preference(order, hashes, capacities)
        matched = self._table_matched(replicas, hashes)
        if matched:
            return [*matched, *(r for r in order if all(r is not m for m in matched))], len(matched)
        if self.balance_new:
            order.sort(key=lambda r: self.owned.get(r.base_url, 0))  # stable: rendezvous order breaks ties
        return order, 0

    def _table_matched(self, replicas: Sequence[Replica], hashes: Sequence[int]) -> list[Replica]:
        """Replicas the table remembers for the deepest block (at least ``match_threshold``
        of the prompt), by depth, then recency."""
        by_url = {r.base_url: r for r in replicas}
        matched: list[Replica] = []
        for depth in range(len(hashes), 0, -1):
            if depth < self.match_threshold * len(hashes) or len(matched) == len(replicas):
                break
            for url in self.table.get(hashes[depth - 1], ()):
                r = by_url.get(url)
                if r is not None and all(r is not m for m in matched):
                    matched.append(r)
        return matched

    def _modelled_preference(self, order: list[Replica], hashes: Sequence[int],
                             capacities: dict[str, int]) -> tuple[list[Replica], int]:
        caches, need = self.caches, max(1.0, self.match_threshold * len(hashes))
        depth = {r.base_url: caches.depth(r.base_url, hashes) for r in order}
        matched = sorted((r for r in order if depth[r.base_url] >= need), reverse=True,
                         key=lambda r: (depth[r.base_url], caches.last_used(r.base_url, hashes[0])))
        n_matched = len(matched)
        rest = [r for r in order if depth[r.base_url] < need]
        # A partly evicted prefix (tails go first) still saves its cached head: replicas
        # holding at least ``hrw_blocks`` leading blocks come first, deepest first (a short
        # preamble every tenant shares is on every replica, so it does not pull).
        partial = {u: (d if d >= self.hrw_blocks else 0) for u, d in depth.items()}
        if not matched and not any(partial.values()):
            # Modelled as evicted everywhere: back to where the table says it went (its
            # tenant's replica keeps it next time), as the plain table would; the model
            # places only prefixes the table does not know.
            remembered = self._table_matched(order, hashes)
            if remembered:
                return [*remembered, *(r for r in order if all(r is not m for m in remembered))], len(remembered)
        n_matched += sum(1 for r in rest if partial[r.base_url])  # sorted to the front below
        if self.balance_new:
            rest.sort(key=lambda r: (-partial[r.base_url], caches.coldness(r.base_url, capacities[r.base_url])))
        else:
            rest.sort(key=lambda r: -partial[r.base_url])  # stable: ties keep rendezvous order
        return [*matched, *rest], n_matched

    def _update_capacities(self, replicas: Sequence[Replica]) -> None:
        self.capacities.update(self._scraped_capacities(replicas))

    def _scraped_capacities(self, replicas: Sequence[Replica]) -> dict[str, int]:
        """Each replica's modelled capacity in gateway blocks, from its scraped cache size
        (else the ``cache_blocks`` option); replicas with neither are left out (all of them
        without ``cache_model``)."""
        if not self.cache_model:
            return {}
        out = {}
        for r in replicas:
            tokens = r.metrics.cache_tokens or (self.cache_blocks * self.block_tokens if self.cache_blocks else None)
            capacity = self.caches.capacity(tokens)
            if capacity is not None:
                out[r.base_url] = capacity
        return out

    def observe_usage(self, body: dict, prompt_tokens: int) -> None:
        """Learn the served model's characters per token from an answer's
        ``usage.prompt_tokens`` for request ``body`` (capacity-aware mode's unit conversion)."""
        if self.capacities and isinstance(prompt_tokens, int) and not isinstance(prompt_tokens, bool):
            self.caches.observe(len(prompt_text(body)), prompt_tokens)

    def holder(self, block: int) -> str | None:
        """The replica that last received ``block`` (``None`` if the table does not hold it)."""
        urls = self.table.get(block)
        return urls[0] if urls else None

    def learn(self, hashes: Sequence[int], url: str) -> None:
        """Remember that the prompt with block ``hashes`` went to replica ``url`` (this
        gateway's choice, or another gateway's shared through :mod:`backends.vllm.shared`)."""
        table, owned, keep = self.table, self.owned, self.holders
        for h in hashes:
            old = table.get(h, ())
            if not old or old[0] != url:
                new = (url, *(u for u in old if u != url))[:keep]
                for u in old:
                    if u not in new:
                        owned[u] -= 1
                if url not in old:
                    owned[url] = owned.get(url, 0) + 1
                table[h] = new
            table.move_to_end(h)
        while len(table) > self.table_blocks:
            _, old = table.popitem(last=False)
            for u in old:
                owned[u] -= 1
        capacity = self.capacities.get(url)
        if capacity is not None:
            self.caches.touch(url, hashes, capacity)


def _weight(key: bytes, url: str) -> int:
    return int.from_bytes(hashlib.blake2b(key + url.encode(), digest_size=8).digest(), "big")
