"""Rate limits (requests and tokens per minute) and USD budgets, enforced atomically.

Two implementations of one interface (:class:`gateway.limits.base.Limiter`): in-process
(:mod:`gateway.limits.memory`, the embedded default) and Redis (:mod:`gateway.limits.redis`,
shared by every gateway replica).
"""
