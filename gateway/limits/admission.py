"""Admission of one request against its key's limits and its tenant's budget, and
settlement of its real usage.

Settlement runs in a background task so that it also happens when the client went away
(a cancelled stream) without blocking the response.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from backends.errors import MixrouteError
from gateway.auth.guard import Principal
from gateway.limits.base import (TENANT_SUBJECT, Limiter, LimiterUnavailable, Limits, RateLimitExceeded,
                                 Reservation)
from gateway.limits.runaway import RUNAWAY_SUBJECT, RunawayCheck, throttled
from router.decision import Decision
from router.records import OutcomeRecord

log = logging.getLogger("mixroute.limits")
_pending: set[asyncio.Task] = set()


class LimitsUnavailable(MixrouteError):
    status = 503
    code = "limits_unavailable"


@dataclass
class Admission:
    """A granted admission; :meth:`settle` once with the outcome. ``spent`` counts the
    outcome's cost in the runaway check (tenant and route of the request). ``unadmitted``:
    the limits a request admitted without the limiter (unreachable, policy ``open``) would
    have counted against; its spend is noted for them (:meth:`Limiter.count_unadmitted`)."""

    limiter: Limiter | None = None
    reservations: list[Reservation] = field(default_factory=list)
    spent: Callable[[float], None] | None = None
    unadmitted: list[Limits] = field(default_factory=list)

    def headers(self) -> dict[str, str]:
        """OpenAI's ``x-ratelimit-*`` headers of the key's window (its reservation with
        rpm or tpm), for the response; empty without such limits or when admitted without
        the limiter (Redis down, policy ``open``)."""
        for res in self.reservations:
            if res.limits.rpm is not None or res.limits.tpm is not None:
                return res.headers()
        return {}

    def settle(self, outcome: OutcomeRecord) -> None:
        if self.spent is not None and outcome.cost_usd:
            self.spent(outcome.cost_usd)
        at = outcome.created_at.timestamp()  # the outcome row's own time (gateway.limits.recent)
        if self.limiter is not None and outcome.cost_usd:
            for limits in self.unadmitted:
                self.limiter.count_unadmitted(limits, outcome.cost_usd, at)
        if self.limiter is None or not self.reservations:
            return
        task = asyncio.get_running_loop().create_task(self._settle(outcome.tokens_in + outcome.tokens_out,
                                                                    outcome.cost_usd, at))
        _pending.add(task)
        task.add_done_callback(_pending.discard)

    async def _settle(self, tokens: int, cost_usd: float, at: float) -> None:
        for res in self.reservations:
            try:
                await self.limiter.settle(res, tokens, cost_usd, at)
            except LimiterUnavailable as exc:
                log.warning("could not settle spend of %s (%s); retried once the limiter answers again",
                            res.limits.subject, exc)


def limits_of(principal: Principal) -> list[Limits]:
    """The limits a request counts against: its key's, then its tenant's (budget, rpm, tpm)."""
    key = principal.key
    if key is None:
        return []
    out = []
    if key.rpm is not None or key.tpm is not None or key.budget_usd is not None:
        out.append(Limits(subject=key.key_id, rpm=key.rpm, tpm=key.tpm, budget_usd=key.budget_usd, period=key.period))
    if key.tenant_budget_usd is not None or key.tenant_rpm is not None or key.tenant_tpm is not None:
        out.append(Limits(subject=f"{TENANT_SUBJECT}{key.tenant}", rpm=key.tenant_rpm, tpm=key.tenant_tpm,
                          budget_usd=key.tenant_budget_usd, period=key.tenant_period))
    return out


async def admit(limiter: Limiter, principal: Principal, decision: Decision, on_unavailable: str,
                runaway: RunawayCheck | None = None) -> Admission:
    """Admit a decided request against its key's limits, and against the throttle of a
    tenant or route whose spend ran away (``runaway``, :mod:`gateway.limits.runaway`).

    Tokens and cost reserved are the chosen candidate's ceiling when the request sets
    ``max_tokens`` (the most it can cost: :attr:`router.decision.Candidate.cost_ceiling_usd`),
    else its expected ones; the answer settles them with the real ones.

    Raises:
        gateway.limits.base.RateLimitExceeded, gateway.limits.base.BudgetExceeded: over a limit.
        gateway.limits.runaway.SpendThrottled: over a runaway throttle.
        LimitsUnavailable: the limiter is down and the policy says ``closed``.
    """
    tenant, route = principal.tenant, decision.record.route
    spent = (lambda usd: runaway.observe(tenant, route, usd)) if runaway is not None else None
    all_limits = limits_of(principal) + (runaway.throttles(tenant, route) if runaway is not None else [])
    if not all_limits:
        return Admission(spent=spent)
    chosen = next(c for c in decision.candidates if c.backend == decision.record.chosen)
    ceiling = chosen.cost_ceiling_usd is not None
    tokens = (chosen.output_tokens_ceiling if ceiling else chosen.expected_output_tokens) + _input_tokens(decision)
    cost = chosen.cost_ceiling_usd if ceiling else chosen.expected_cost_usd
    reservations: list[Reservation] = []
    try:
        for limits in all_limits:
            await limiter.seed_budget(limits)  # once per process and period
            try:
                reservations.append(await limiter.admit(limits, tokens, cost))
            except RateLimitExceeded as exc:
                if limits.subject.startswith(RUNAWAY_SUBJECT):
                    raise throttled(exc, limits) from None
                raise
    except LimiterUnavailable as exc:
        await _release(limiter, reservations)
        if on_unavailable == "closed":
            raise LimitsUnavailable("Rate limits cannot be checked right now; try again shortly") from None
        log.warning("limiter unavailable (%s); admitting %s without limits (policy: open)", exc, principal.tenant)
        return Admission(limiter, spent=spent, unadmitted=all_limits)
    except Exception:
        await _release(limiter, reservations)  # the key admitted it, the tenant did not: undo the key's count
        raise
    return Admission(limiter, reservations, spent)


async def _release(limiter: Limiter, reservations: list[Reservation]) -> None:
    for res in reservations:
        try:
            await limiter.settle(res, 0, 0.0)
        except LimiterUnavailable:
            pass


def _input_tokens(decision: Decision) -> int:
    from backends.openai_shapes import estimate_tokens, prompt_text

    return estimate_tokens(prompt_text(decision.record.endpoint, decision.body))
