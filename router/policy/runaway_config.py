"""The ``runaway:`` block of a policy: catching a tenant's or a route's spend rate that jumps
far above its own recent baseline (a retry loop, a leaked key, an agent stuck in a cycle).

The gateway (:mod:`gateway.limits.runaway`) keeps, per tenant and per route, the spend of
the last ``window_s`` seconds and an exponentially weighted moving average (EWMA) of the
spend per window, and fires when the short-window rate exceeds ``factor`` times that
baseline (and ``min_usd_per_min``). The EWMA weight is the usual span form,
``alpha = 2 / (baseline_windows + 1)`` (as in pandas' ``ewm(span=...)``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from backends.fields import Integer, Number, Strict


class RunawayConfig(Strict):
    """Runaway-cost detection and what happens when it fires.

    Attributes:
        action: ``alert`` logs a warning, counts the event and shows it on the dashboard;
            ``throttle`` does the same and then admits the tenant's (or route's) requests
            at ``throttle_rpm`` only (HTTP 429 ``spend_rate_throttled`` above it) until the
            rate falls back; ``off`` turns the check off.
        scopes: what is watched: ``tenant`` (each tenant's spend), ``route`` (each route's).
        window_s: the short window the current rate is measured over (seconds); also the
            length of one baseline sample.
        baseline_windows: the EWMA's span in windows (how far back the baseline looks).
        warmup_windows: windows of history a tenant or route needs before it can fire (a
            new tenant has no baseline yet).
        factor: fires when the short-window rate exceeds ``factor`` x the baseline.
        min_usd_per_min: and is at least this many USD per minute (so that a near-zero
            baseline does not fire on cents).
        hold_s: once fired, the state holds at least this long after the rate falls back
            below the threshold (seconds); the baseline does not learn from a fired period.
        throttle_rpm: requests per minute admitted while throttled (``action: throttle``).
    """

    action: Literal["off", "alert", "throttle"] = "alert"
    scopes: list[Literal["tenant", "route"]] = Field(default_factory=lambda: ["tenant", "route"], min_length=1)
    window_s: Number = Field(default=60.0, gt=0, le=3600)
    baseline_windows: Integer = Field(default=60, ge=2, le=10_000)
    warmup_windows: Integer = Field(default=10, ge=1, le=10_000)
    factor: Number = Field(default=10.0, gt=1, le=10_000)
    min_usd_per_min: Number = Field(default=0.01, ge=0)
    hold_s: Number = Field(default=300.0, ge=0, le=7 * 24 * 3600)
    throttle_rpm: Integer | None = Field(default=None, ge=1, le=1_000_000)

    @model_validator(mode="after")
    def _throttle_needs_rate(self) -> "RunawayConfig":
        if self.action == "throttle" and self.throttle_rpm is None:
            raise ValueError("'action: throttle' needs 'throttle_rpm': the rate (requests per minute) to throttle to")
        if self.action != "throttle" and self.throttle_rpm is not None:
            raise ValueError(f"'throttle_rpm' applies only with 'action: throttle' (the action is {self.action!r})")
        return self
