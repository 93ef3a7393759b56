"""The gateway's model of each replica's prefix cache, for capacity-aware prefix affinity.

A replica's prefix cache holds ``num_gpu_blocks`` KV blocks of ``block_size`` tokens and
evicts free blocks least recently used, a finished request's tail blocks first (vLLM design
docs, "Automatic Prefix Caching"). When a replica reports that capacity
(``vllm:cache_config_info``, :mod:`backends.vllm.metrics`) or the pool's ``cache_blocks``
option gives it, the gateway replays its own choices into one LRU per replica, bounded by
that capacity, and so knows two things the plain block table cannot:

- whether a prefix it sent to a replica has since been pushed out by other traffic (then
  following it gains nothing, and the prefix is placed like a new one);
- which replica's cache turns over slowest: the one whose least recently used block is
  oldest (or that is not full yet). A new prefix placed there evicts the coldest data in
  the pool instead of an active tenant's prefix.

Units. The gateway hashes prompts in blocks of ``block_tokens x CHARS_PER_TOKEN``
characters (:mod:`backends.vllm.blocks`), not in the replica's tokens. A capacity of
``T`` tokens therefore holds ``T x c / (block_tokens x CHARS_PER_TOKEN)`` gateway blocks,
where ``c`` is the served model's characters per token, learned from the answers
(``prompt characters / usage.prompt_tokens``, an exponential moving average with weight
``1/32`` per answer; :data:`backends.vllm.blocks.CHARS_PER_TOKEN` until the first answer).

What it does not model: other gateways' traffic that was not shared with this one
(:mod:`backends.vllm.shared` shares choices), blocks pinned by running sequences, replica
restarts (a restarted replica is empty; the model catches up as the LRU turns over).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from backends.vllm.blocks import CHARS_PER_TOKEN

EWMA_WEIGHT = 1 / 32
"""Weight of one answer in the characters-per-token average."""


class ReplicaCaches:
    """One modelled LRU of gateway block hashes per replica URL (see the module docstring).

    Args:
        block_tokens: tokens per gateway block (the chooser's ``block_tokens``).
    """

    def __init__(self, block_tokens: int):
        self.block_tokens = block_tokens
        self.chars_per_token = float(CHARS_PER_TOKEN)
        self.lru: dict[str, OrderedDict[int, int]] = {}
        self.tick = 0

    def observe(self, prompt_chars: int, prompt_tokens: int) -> None:
        """Learn the served model's characters per token from one answer (ignored unless
        both counts are positive)."""
        if prompt_chars > 0 and prompt_tokens > 0:
            self.chars_per_token += EWMA_WEIGHT * (prompt_chars / prompt_tokens - self.chars_per_token)

    def capacity(self, cache_tokens: int | None) -> int | None:
        """Gateway blocks that a cache of ``cache_tokens`` tokens holds (``None`` if unknown)."""
        if not cache_tokens:
            return None
        return max(1, int(cache_tokens * self.chars_per_token / (self.block_tokens * CHARS_PER_TOKEN)))

    def touch(self, url: str, hashes: Sequence[int], capacity: int) -> None:
        """Record that replica ``url`` received a prompt with block ``hashes``: all of them
        become most recently used, the first block last (so the tail is evicted first), then
        the LRU is cut to ``capacity`` blocks."""
        self.tick += 1
        lru = self.lru.setdefault(url, OrderedDict())
        for h in reversed(hashes):
            lru[h] = self.tick
            lru.move_to_end(h)
        while len(lru) > capacity:
            lru.popitem(last=False)

    def depth(self, url: str, hashes: Sequence[int]) -> int:
        """Leading blocks of ``hashes`` that replica ``url`` is modelled to hold (what vLLM
        would find: the longest run of cached leading blocks)."""
        lru = self.lru.get(url)
        if not lru:
            return 0
        n = 0
        for h in hashes:
            if h not in lru:
                break
            n += 1
        return n

    def last_used(self, url: str, block: int) -> int:
        """Tick at which ``url`` last received ``block`` (0 if not held)."""
        return self.lru.get(url, {}).get(block, 0)

    def coldness(self, url: str, capacity: int) -> tuple[int, int]:
        """Sort key, smallest first, for placing a new prefix: a replica with free room
        (``(0, blocks held)``), then full ones by the age of their least recently used block
        (``(1, its tick)``: oldest first)."""
        lru = self.lru.get(url)
        if not lru or len(lru) < capacity:
            return (0, len(lru) if lru else 0)
        return (1, next(iter(lru.values())))
