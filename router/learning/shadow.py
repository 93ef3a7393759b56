"""Shadow evaluation of an adapter version (the policy's ``learning.shadow``).

Beside every routed decision, the engine decides again with the shadow version (its own
heads' predictor if it has any, else the live prediction; its own outcome memory, the
live observations plus its correction) as a dry run: no exploration, no change to a
``route_target`` window, nothing sent. What it would have done is recorded in the live
decision's ``signals.shadow``: ``{"version", "chosen", "reason", "quality": {backend:
q'}}`` (``chosen`` ``None`` and ``reason`` the error code when it would refuse). So a
candidate version is measured on live traffic (how often it would choose otherwise, at
what predicted quality and cost) before it is promoted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from router.decision import Decision, RoutingRequest
from router.learning.baked import Baked
from router.learning.memory import OutcomeMemory
from router.predict import Prediction, Predictor


@dataclass(frozen=True)
class Shadow:
    """A version decided beside the live one.

    Attributes:
        version: its id.
        predictor: its own heads' predictor; ``None``: the live router's prediction is reused
            (no second encoder pass).
        outcomes: its outcome memory (live observations with its correction).
        baked: its correction (:mod:`router.learning.baked`), for the memory's refresh.
    """

    version: str
    predictor: Predictor | None
    outcomes: OutcomeMemory
    baked: Baked | None = None


async def shadow_signal(shadow: Shadow, req: RoutingRequest, text: str, backends: list, raw: Prediction,
                        learning: Any, route: Callable[[RoutingRequest, Prediction], Decision],
                        refusals: tuple[type[Exception], ...]) -> dict[str, Any]:
    """``signals.shadow`` of one request (module docstring).

    Args:
        raw: the live predictor's prediction, before the live memory's blend.
        learning: the policy's ``learning`` block (the blend's settings).
        route: decides for a request and a prediction (the engine's route step).
        refusals: the errors by which the engine refuses a request.
    """
    prediction = raw if shadow.predictor is None else await shadow.predictor.predict(text, backends)
    prediction = shadow.outcomes.adjust(prediction, backends, learning)
    try:
        decision = route(replace(req, dry_run=True, span=None), prediction)
    except refusals as exc:
        return {"version": shadow.version, "chosen": None, "reason": getattr(exc, "code", type(exc).__name__)}
    return {"version": shadow.version, "chosen": decision.record.chosen, "reason": decision.record.reason,
            "quality": {c.backend: round(c.predicted_quality, 6) for c in decision.candidates}}

