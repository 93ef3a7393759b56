"""Record builders for the store tests."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from router.records import DecisionRecord, OutcomeRecord

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)


def decision(rid: str, *, at: float = 0.0, **kw: Any) -> DecisionRecord:
    """A decision ``at`` seconds after :data:`T0`."""
    base: dict[str, Any] = dict(
        request_id=rid, route="default", policy_hash="p1", chosen="fake-small",
        reason="cheapest_above_bar",
        candidates=[{"backend": "fake-small", "model": "small", "predicted_quality": 0.91,
                     "expected_cost_usd": 1.5e-5, "expected_output_tokens": 120,
                     "eligible": True, "note": None}],
        fallbacks=["fake-large"], signals={"domain": "code", "difficulty": 0.3},
        tenant="acme", prefix_hash="abc", created_at=T0 + timedelta(seconds=at))
    base.update(kw)
    return DecisionRecord(**base)


def outcome(rid: str, *, at: float = 1.0, **kw: Any) -> OutcomeRecord:
    """An outcome ``at`` seconds after :data:`T0`."""
    base: dict[str, Any] = dict(
        request_id=rid, backend="fake-small", model="small", status="ok", http_status=200,
        ttft_s=0.12, itl_s=0.01, latency_s=0.8, tokens_in=50, tokens_out=120,
        tokens_cached=32, cost_usd=1.4e-5, streamed=True, created_at=T0 + timedelta(seconds=at))
    base.update(kw)
    return OutcomeRecord(**base)
