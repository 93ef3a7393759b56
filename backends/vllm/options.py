"""Typed ``options`` of a ``vllm`` backend in the policy (``backends[].options``).

Example::

    - name: llama-pool
      kind: vllm
      model: meta-llama/Llama-3.1-8B-Instruct
      endpoints: [http://vllm-0:8000/v1, http://vllm-1:8000/v1]
      options: {affinity: true, queue_threshold: 8, metrics_interval_s: 2}
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator


class PoolOptions(BaseModel):
    """Replica choice and health of a vLLM pool.

    Validated by the policy loader (:func:`router.policy.load_policy`), so a bad option is
    a ``FILE:LINE backends[i].options.KEY`` error before the backend is built. Every key but
    ``metrics_interval_s``, ``eject_after`` and ``retry_ejected_s`` tunes the affinity chooser and does nothing
    with ``affinity: false``. docs/DEPLOY.md lists them with their defaults.

    Attributes:
        affinity: prefix-affinity choice (:mod:`backends.vllm.affinity`); off: least loaded.
        block_tokens: tokens per hashed block (vLLM's default KV block size is 16).
        hrw_blocks: leading blocks that form the rendezvous-hashing key.
        load_factor: bounded-load factor (>= 1).
        min_bound: in-flight requests a replica always accepts before load bounds apply.
        queue_threshold: scraped ``vllm:num_requests_waiting`` above which a replica is
            not preferred (requests; needs scraping: an unscraped queue counts as 0).
        match_threshold: share of a prompt's blocks that a remembered prefix must cover
            for the request to follow it (:mod:`backends.vllm.affinity`).
        prefix_holders: replicas remembered per prefix block, most recent first: when the
            best holder is overloaded, the next one that holds the prefix is preferred.
        balance_new: a never-seen prefix goes to the replica owning the fewest blocks of
            this gateway's table; off: to its rendezvous-hash replica, which every gateway
            process agrees on (prefer off with several gateway replicas).
        cache_model: capacity-aware affinity: model each replica's LRU prefix cache once
            every capacity is known (:mod:`backends.vllm.cachemodel`).
        cache_blocks: KV blocks of ``block_tokens`` tokens per replica (vLLM's
            ``num_gpu_blocks``), for replicas whose ``/metrics`` has no
            ``vllm:cache_config_info``; unset: scraped capacities only.
        metrics_interval_s: seconds between ``/metrics`` scrapes of every replica, which
            feed ``queue_threshold`` and replica health; 0 disables scraping (and so probing
            ejected replicas back in: they return on their next successful request).
        eject_after: consecutive failures (requests that got no answer: connect errors,
            timeouts, connections dropped before the answer; failed scrapes) that eject a
            replica.
        retry_ejected_s: seconds after an ejection when a request may try the replica
            again (without scraping, the only way back; a failure ejects it again).
    """

    # Not strict: numbers from ``${ENV:-5}`` substitution arrive as strings.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    affinity: bool = True
    block_tokens: int = Field(default=16, ge=1, le=4096)
    hrw_blocks: int = Field(default=8, ge=1)
    load_factor: float = Field(default=1.25, ge=1.0)
    min_bound: int = Field(default=8, ge=1)
    queue_threshold: float = Field(default=8, ge=0)
    match_threshold: float = Field(default=0.5, ge=0, le=1)
    prefix_holders: int = Field(default=2, ge=1, le=16)
    balance_new: bool = True
    cache_model: bool = True
    cache_blocks: int | None = Field(default=None, ge=1)
    metrics_interval_s: float = Field(default=5.0, ge=0)
    eject_after: int = Field(default=3, ge=1)
    retry_ejected_s: float = Field(default=10.0, gt=0)

    @field_validator("block_tokens", "hrw_blocks", "load_factor", "min_bound", "queue_threshold", "match_threshold",
                     "prefix_holders", "cache_blocks", "metrics_interval_s", "eject_after", "retry_ejected_s", mode="before")
    @classmethod
    def _not_a_boolean(cls, value: Any) -> Any:
        if isinstance(value, bool):  # YAML true/false would otherwise count as 1/0
            raise ValueError("must be a number, not true/false")
        return value
