"""The FastAPI application factory: ``create_app(settings)``.

Lifespan: start the store -> load the predictor -> load the policy (runtime) -> watch the
policy file -> ready. On shutdown: stop watching, close backends, drain the store.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import socket
import uuid
from contextlib import asynccontextmanager

from fastapi import FastAPI

from gateway import body_guard, dashboard, errors, observability, openapi
from gateway.api import admin, completions, embeddings, feedback, health, messages, models, responses
from gateway.auth.guard import Authenticator
from gateway.hosts import LoopbackHostMiddleware
from gateway.limits.runaway import RunawayWatch
from gateway.runtime import PolicyHolder
from gateway.sessions import RedisSessions, Sessions
from gateway.settings import Settings
from gateway.store.feedback_queue import FeedbackQueue
from router.policy.redact import redact_policy_text

log = logging.getLogger("mixroute.gateway")


def load_predictor(settings: Settings, adapters_dir=None, strict: bool = False):
    """The classifier predictor per ``settings.classifier`` (the heads in ``adapters_dir``;
    default the shipped ones), or ``None`` for the prior baseline.

    Raises:
        RuntimeError: ``classifier="on"`` (or ``strict``: an adapter version's own heads)
            and the classifier cannot be loaded.
    """
    if settings.classifier == "off":
        return None
    try:
        from router.classify import load_predictor as load_classifier

        predictor = load_classifier(
            adapters_dir, max_batch=settings.classifier_max_batch, max_wait_ms=settings.classifier_max_wait_ms,
            dtype=settings.classifier_dtype, scan_chars=settings.classifier_scan_chars,
            memory=settings.classifier_memory != "off", exclude_exact=settings.classifier_memory == "exclude-exact",
            memory_smoothing=settings.classifier_memory_smoothing,
            linear=settings.classifier_linear, rank_space=settings.classifier_rank_space == "on")
    except Exception as exc:  # ImportError (no torch/peft) or missing artifacts
        if settings.classifier == "on" or strict:
            raise RuntimeError(f"classifier=on but it cannot be loaded: {exc}") from exc
        log.warning("classifier not loaded (%s); routing on the policy's quality priors", exc)
        return None
    return predictor


def traced(predictor):
    """``predictor`` wrapped so each prediction is a tracing span (``None`` stays ``None``)."""
    if predictor is None:
        return None
    from gateway.observability.hooks import TracedPredictor

    return TracedPredictor(predictor)


def versions_of(settings: Settings):
    """The adapter versions folder of ``settings`` (:mod:`router.learning.versions`)."""
    from router.classify import default_adapters_dir
    from router.learning.versions import Versions, default_dir

    return Versions(settings.adapters_dir or default_dir(), shipped_heads=default_adapters_dir())


def make_limiter(settings: Settings):
    """Redis limiter when ``MIXROUTE_REDIS_URL`` is set, else the in-process one."""
    if settings.redis_url:
        from gateway.limits.redis import RedisLimiter

        return RedisLimiter(settings.redis_url, prefix=settings.redis_prefix, timeout_s=settings.redis_timeout_s)
    from gateway.limits.memory import MemoryLimiter

    return MemoryLimiter()


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the gateway app. Nothing is loaded until the lifespan starts.

    Args:
        settings: process settings; read from the environment when ``None``.
    """
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        from gateway.store.writer import Store

        store = Store(settings)
        await store.start()
        app.state.store = store
        app.state.feedback = FeedbackQueue(store, settings.feedback_max_pending)
        app.state.feedback.start()
        app.state.auth = Authenticator(store.engine, settings.admin_key, ttl_s=settings.key_cache_ttl_s)
        app.state.limiter = make_limiter(settings)
        app.state.sessions = Sessions(RedisSessions(settings.redis_url, settings.redis_prefix)
                                      if settings.redis_url else None)
        from gateway.store.spend import recorded_spend

        app.state.limiter.recorded_spend = lambda subject, since, before=None: recorded_spend(store.engine, subject,
                                                                                               since, before)
        if settings.redis_url:
            problem = await app.state.limiter.check()
            if problem:
                log.warning("redis %s is not reachable at start (%s): until it answers, requests under rate "
                            "limits or budgets follow the policy's limits.on_unavailable (open, the default: admitted "
                            "unlimited; closed: 503 limits_unavailable; docs/LIMITS.md)", app.state.limiter.where, problem)
        predictor = load_predictor(settings)
        batcher = getattr(predictor, "batcher", None)
        obs = getattr(app.state, "observability", None)
        if batcher is not None and obs is not None:
            batcher.on_batch = obs.metrics.observe_classifier
        predictor = traced(predictor)
        broadcast = None

        def on_loaded(lp) -> None:
            store.record_policy(lp.hash, redact_policy_text(lp.text))  # no inline secret in the store
            if broadcast is not None:
                broadcast.announce(lp.hash)

        shared = (settings.redis_url, settings.redis_prefix, uuid.uuid4().hex[:12]) if settings.redis_url else None
        holder = PolicyHolder(settings.policy_path, predictor, on_loaded=on_loaded, shared=shared)
        app.state.policies = holder
        await holder.load()
        if settings.redis_url and not holder.is_demo:
            from gateway.broadcast import PolicyBroadcast

            broadcast = PolicyBroadcast(settings.redis_url, settings.redis_prefix, holder)
            broadcast.start()
        if settings.policy_watch:
            holder.watch()
        from gateway.adapters import AdapterWatcher
        from gateway.learning import Learner

        learner = Learner(store.engine, holder, settings.learning_refresh_s)
        adapters = app.state.adapters = AdapterWatcher(
            versions_of(settings), holder, learner, lambda folder: traced(load_predictor(settings, folder, strict=True)),
            settings.adapters_poll_s, guard_every_s=settings.learning_refresh_s,
            name=f"guard@{socket.gethostname()}:{settings.port}")
        await adapters.sync(memory=False)
        learner.start()
        adapters.start()
        from gateway.judge import Judge

        obs = getattr(app.state, "observability", None)
        app.state.judge = Judge(holder, store, obs.metrics if obs is not None else None)
        app.state.judge.start()
        # Everything loaded so far (policy, backends, classifier, libraries) lives as long as
        # the process: move it out of the collector's reach so full collections stay short.
        # Measured with bench.gateway_overhead: p99 at concurrency 1 fell from ~60 ms to single
        # digits once gen-2 collections stopped walking the startup heap.
        gc.collect()
        gc.freeze()
        app.state.ready = True
        try:
            yield
        finally:
            app.state.ready = False
            if broadcast is not None:
                await broadcast.aclose()
            await adapters.aclose()
            await learner.aclose()
            await app.state.judge.aclose()
            await holder.aclose()
            await app.state.feedback.aclose()
            await app.state.limiter.aclose()
            if isinstance(app.state.sessions.store, RedisSessions):
                await app.state.sessions.store.aclose()
            await store.stop()
            await app.state.dashboard_sessions.aclose()
            from gateway.dashboard import worker as dashboard_worker

            await asyncio.to_thread(dashboard_worker.shutdown)

    app = FastAPI(title="mixroute", version="0.1.0", lifespan=lifespan, docs_url="/docs", redoc_url=None)
    app.state.settings = settings
    app.state.ready = False
    app.state.policies = PolicyHolder(settings.policy_path, None)
    app.state.sessions = Sessions()
    app.state.runaway = RunawayWatch()
    errors.install(app)
    # The completion routes come first: a request is matched against routes in order, and
    # these carry nearly all traffic.
    for module in (completions, responses, messages, embeddings, models, health, feedback, admin):
        app.include_router(module.router)
    observability.install(app)
    dashboard.install(app, settings)
    body_guard.install(app, settings)
    app.add_middleware(LoopbackHostMiddleware, allowed_hosts=settings.allowed_hosts)  # outermost
    openapi.install(app)
    return app
