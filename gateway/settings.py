"""Process settings: one typed model read from ``MIXROUTE_*`` environment variables.

Everything a process needs that is not part of the routing policy lives here. The
routing policy (backends, routes, rules) is a separate YAML file, see
:mod:`router.policy`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


class Settings(BaseSettings):
    """Settings of one gateway process.

    Attributes:
        policy_path: routing policy YAML; ``None`` loads the bundled demo policy.
        database_url: SQLAlchemy URL of the decision/outcome store. SQLite file in the
            working directory by default; ``postgresql+psycopg://...`` in production.
        redis_url: shared state for many replicas (``None``: in-process state).
        host, port: where ``mixroute serve`` listens.
        max_body_bytes: request bodies larger than this get HTTP 413 (bytes).
        body_read_timeout_s: a request body not received whole this long after its head
            gets HTTP 408 and its connection is closed (seconds; slow-body clients).
        max_body_bytes_in_flight: bytes all request bodies in flight may hold together; a
            body that would pass it gets HTTP 503 with ``Retry-After`` (bytes).
        max_connections: open client connections (and requests) served at once; beyond it
            uvicorn answers 503 and closes (its ``limit_concurrency``).
        keep_alive_s: how long an idle client connection stays open (seconds). Longer than a
            load balancer's idle timeout (AWS ALB 60 s; 75 s as nginx), so the gateway never
            closes a connection the balancer or a client is about to reuse (a request sent
            into a closing connection is reset and never reaches the gateway).
        event_loop: the server's event loop: ``uvloop`` (default; ``auto`` is the same where
            uvloop is installed), or ``asyncio`` (the standard library's). Beyond saturation
            uvloop serves more requests per second but lets a few wait far behind the
            others, where the standard loop keeps every request's wait close to the average
            (docs/BENCHMARKS.md, "Event loop under overload").
        store_queue_size: bound of the in-memory write queue of the store (rows).
        store_batch_size: rows per batched insert.
        store_flush_interval_s: longest time a row waits in the queue (seconds).
        store_journal_path: the store's spill journal (default: one per database,
            :func:`gateway.store.rows.default_journal_path`: ``<file>.journal.jsonl`` next to
            the SQLite file, or ``mixroute-journal-<hash>.jsonl`` in the working directory,
            the name ending in ``-<port>``); one process holds it (a second is refused).
        store_writer_idle: run the store's writer thread under Linux's ``SCHED_IDLE`` policy
            while no backlog is queued, so that requests preempt it at once on a shared core
            (:class:`gateway.store.priority.IdlePolicy`).
        store_journal_max_bytes: cap on the store's spill journal (bytes); rows past it
            are dropped, logged and counted in ``StoreStats.capped``.
        store_on_loss: when neither the database nor the journal can take records:
            ``refuse`` new requests (503 ``store_unavailable``), or ``serve`` them and lose
            their records (logged at start and as rows are lost).
        policy_watch: hot-reload the policy file when it changes.
        learning_refresh_s: how often the outcome memory is refreshed from the store's
            observations (seconds; docs/LEARNING.md).
        adapters_dir: the folder of adapter versions and the ``active.json`` pointer
            (:mod:`router.learning.versions`; default ``$XDG_DATA_HOME/mixroute/adapters``,
            else ``~/.local/share/mixroute/adapters``); shared by the replicas.
        adapters_poll_s: how often a gateway reads the pointer and, when it names another
            version, swaps to it (seconds; docs/LEARNING.md "Adapter versions").
        admin_key: key for admin endpoints (``MIXROUTE_ADMIN_KEY``).
        key_cache_ttl_s: how long a key lookup is cached; a revoked key keeps working
            on a replica for at most this long (seconds).
        redis_prefix: prefix of every Redis key mixroute writes.
        redis_timeout_s: how long one rate-limit/budget call to Redis may take before Redis
            counts as unavailable (``limits.on_unavailable`` then decides), seconds. The
            wait is measured on the gateway's event loop, so a loop busy with a burst adds
            to it: too short a timeout reports a healthy Redis unavailable under load.
        classifier: ``auto`` loads the shipped classifier heads when torch and peft are
            installed and falls back to the policy's quality priors otherwise; ``on``
            fails start-up without them; ``off`` always uses the priors.
        classifier_max_batch: largest micro-batch of prompts per encoder pass.
        classifier_max_wait_ms: longest a prompt waits for company while the classifier is
            idle (ms; prompts arriving while a batch runs start together when it ends).
        classifier_dtype: encoder precision; ``auto`` picks bfloat16 on CPUs with AMX-BF16
            (and bf16-capable GPUs), else float32.
        classifier_linear: how the encoder's frozen linear maps run: ``auto`` (int8 on CPUs
            with AVX-512 VNNI or AVX-VNNI when the precision is float32, else oneDNN with
            prepacked weights and GELU/residual adds fused), ``int8``, ``onednn`` (float32 or
            bfloat16) or ``default`` (torch's own); docs/CLASSIFIER.md. ``int8`` needs a float32
            encoder on the CPU: with it, ``classifier_dtype`` ``auto`` means float32 and
            ``bfloat16`` is refused at start.
        classifier_rank_space: ``on`` pools heads that adapt only the top layer's output map
            in LoRA rank space (router/classify/pooled.py); ``off`` materialises every head's
            token states (same outputs up to rounding, slower with many heads).
        classifier_scan_chars: prompts up to this many characters are read whole by the pii
            and injection heads, in overlapping 126-token windows (a longer one: its first and
            last half of it; ``scan_coverage`` in each decision's signals says what was read;
            0 = head and tail window only); each window costs one encoder row unless the scan
            cache holds it (router/classify/scan.py).
        classifier_memory: ``on`` blends the quality head with the outcome memory shipped
            next to it (the recorded scores of the 100 most similar training prompts,
            router/classify/memory.py); ``off`` uses the head alone; ``exclude-exact`` ignores
            memory rows identical to the prompt (``mixroute replay`` of rows the memory holds).
        classifier_memory_smoothing: in [0, 1], overrides the memory file's
            ``task_smoothing``: the share of the way each neighbour's recorded score moves to
            its task's mean (:func:`router.neighbours.task_smoothed`; docs/CALIBRATION.md,
            "Task-smoothed neighbour outcomes"). Unset: the file's (0.5 shipped).
        responses_retention_s: how long a response served by ``POST /v1/responses`` with
            ``store`` on stays readable (``GET /v1/responses/{id}``, ``previous_response_id``),
            seconds; older ones are deleted. 30 days, as OpenAI keeps them.
        allowed_hosts: ``Host`` names served while auth is off besides loopback ones
            (comma-separated; ``*.example.com`` for subdomains, ``*`` for any):
            :mod:`gateway.hosts`, the DNS-rebinding guard.
        dashboard_login_attempts: failed dashboard logins allowed per source address per
            minute; past it the source gets 429 (:mod:`gateway.dashboard.login_guard`).
        feedback_max_pending: feedback rows accepted and waiting for their request's decision
            to be found (:mod:`gateway.store.feedback_queue`); past it ``POST /v1/feedback``
            answers 503 ``feedback_backlog_full``.
        metrics_auth: who may read ``GET /metrics`` (every tenant's spend): ``admin`` (the
            admin key), ``none`` (anyone who reaches it), ``auto`` (``admin`` while auth is
            on, ``none`` while it is off); :mod:`gateway.api.metrics`.
    """

    model_config = SettingsConfigDict(env_prefix="MIXROUTE_", extra="ignore")

    policy_path: Path | None = None
    database_url: str = "sqlite:///mixroute.db"
    redis_url: str | None = None
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    max_body_bytes: int = Field(default=10 * 1024 * 1024, gt=0)
    body_read_timeout_s: float = Field(default=30.0, gt=0)
    max_body_bytes_in_flight: int = Field(default=128 * 1024 * 1024, gt=0)
    max_connections: int = Field(default=2048, ge=1)
    keep_alive_s: int = Field(default=75, gt=0)
    event_loop: Literal["auto", "uvloop", "asyncio"] = "auto"
    store_queue_size: int = Field(default=10_000, gt=0)
    store_batch_size: int = Field(default=200, gt=0)
    store_flush_interval_s: float = Field(default=0.2, gt=0)
    store_journal_max_bytes: int = Field(default=1 << 30, gt=0)
    store_journal_path: Path | None = None
    store_on_loss: Literal["refuse", "serve"] = "refuse"
    store_writer_idle: bool = True
    policy_watch: bool = True
    learning_refresh_s: float = Field(default=30.0, gt=0)
    adapters_dir: Path | None = None
    adapters_poll_s: float = Field(default=5.0, gt=0, le=3600, allow_inf_nan=False)
    admin_key: str | None = None
    log_level: Literal["critical", "error", "warning", "info", "debug"] = "info"
    # The doors' own guards (gateway/hosts.py, /metrics, the dashboard, feedback).
    allowed_hosts: Annotated[list[str], NoDecode] = Field(default_factory=list)
    dashboard_login_attempts: int = Field(default=10, ge=1)
    feedback_max_pending: int = Field(default=10_000, ge=1)
    metrics_auth: Literal["auto", "admin", "none"] = "auto"
    key_cache_ttl_s: float = Field(default=5.0, ge=0)
    redis_prefix: str = "mixroute"
    redis_timeout_s: float = Field(default=3.0, gt=0, le=60, allow_inf_nan=False)
    classifier: Literal["auto", "on", "off"] = "auto"
    classifier_max_batch: int = Field(default=32, gt=0)
    classifier_max_wait_ms: float = Field(default=0.0, ge=0)
    classifier_dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    classifier_linear: Literal["auto", "int8", "onednn", "default"] = "auto"
    classifier_rank_space: Literal["on", "off"] = "on"

    @field_validator("classifier_linear")
    @classmethod
    def _linear_needs_float32(cls, linear: str, info: ValidationInfo) -> str:
        if linear == "int8" and info.data.get("classifier_dtype") == "bfloat16":
            raise ValueError("int8 runs the frozen maps of a float32 encoder; with it, "
                             "MIXROUTE_CLASSIFIER_DTYPE must be auto or float32, not bfloat16")
        return linear

    @field_validator("allowed_hosts", mode="before")
    @classmethod
    def _comma_separated(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [h.strip().lower() for h in value.split(",") if h.strip()]
        return value

    @field_validator("log_level", mode="before")
    @classmethod
    def _log_level_any_case(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("store_journal_path", "adapters_dir", mode="before")
    @classmethod
    def _empty_path_is_unset(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, url: str | None) -> str | None:
        # redis-py's from_url accepts these schemes and raises on anything else at start-up.
        if url and not url.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("must start with redis://, rediss:// or unix:// (e.g. redis://127.0.0.1:6379/0)")
        if url:
            from importlib.util import find_spec

            if find_spec("redis") is None:  # else a traceback from the app's start-up
                raise ValueError("is set but the redis client is not installed: pip install 'mixroute[redis]'")
        return url

    classifier_scan_chars: int = Field(default=100_000, ge=0, le=1_000_000)
    classifier_memory: Literal["on", "off", "exclude-exact"] = "on"
    classifier_memory_smoothing: float | None = Field(default=None, ge=0, le=1, allow_inf_nan=False)
    responses_retention_s: float = Field(default=30 * 24 * 3600, gt=0, allow_inf_nan=False)
