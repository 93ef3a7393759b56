"""Policy rules, evaluated before scoring (see :class:`router.policy.models.RuleConfig`).

Errors::

    PromptBlocked   400 invalid_request_error  prompt_blocked
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from router.errors import InvalidRequest
from router.policy.models import BackendConfig, Policy, RouteConfig, RuleConfig


class PromptBlocked(InvalidRequest):
    code = "prompt_blocked"


@dataclass
class RuleResult:
    """What the rules left: candidate backends, a cost cap (USD) and one note per rule applied."""

    backends: list[BackendConfig]
    max_cost_usd: float | None = None
    notes: list[str] = field(default_factory=list)


def matching(policy: Policy, route: RouteConfig, tenant: str | None, headers: dict[str, str],
             signals: dict[str, Any]) -> Iterator[RuleConfig]:
    """The rules whose conditions hold for this request, in policy order."""
    for rule in policy.rules:
        if rule.routes and route.name not in rule.routes:
            continue
        if rule.tenants and tenant not in rule.tenants:
            continue
        if rule.when_header and rule.when_header.lower() not in headers:
            continue
        if any(not _at_least(signals.get(name), threshold) for name, threshold in rule.when_signal.items()):
            continue
        yield rule


def _at_least(value: Any, threshold: float) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value >= threshold


def apply_rules(policy: Policy, route: RouteConfig, backends: list[BackendConfig], tenant: str | None,
                headers: dict[str, str], signals: dict[str, Any]) -> RuleResult:
    """Apply every matching rule's actions to ``backends``.

    Raises:
        PromptBlocked: a matching rule has ``block: true``.
    """
    result = RuleResult(backends=list(backends))
    for rule in matching(policy, route, tenant, headers, signals):
        why = _why(rule, signals)
        if rule.block:
            raise PromptBlocked(f"The request was blocked by the policy rule '{rule.name}'{why}")
        if rule.route_to:
            result.backends = [policy.backend(rule.route_to)]
            result.notes.append(f"{rule.name}: route to {rule.route_to}{why}")
        if rule.allow_backends:
            result.backends = [b for b in result.backends if b.name in rule.allow_backends]
            result.notes.append(f"{rule.name}: allow {rule.allow_backends}{why}")
        if rule.require_tags:
            result.backends = [b for b in result.backends if set(rule.require_tags) <= set(b.tags)]
            result.notes.append(f"{rule.name}: require tags {rule.require_tags}{why}")
        if rule.max_cost_usd is not None:
            cap = rule.max_cost_usd
            result.max_cost_usd = cap if result.max_cost_usd is None else min(cap, result.max_cost_usd)
            result.notes.append(f"{rule.name}: max cost {cap} USD")
    return result


def _why(rule: RuleConfig, signals: dict[str, Any]) -> str:
    if not rule.when_signal:
        return ""
    parts = [f"{k}={signals[k]:.2f}>={v}" for k, v in rule.when_signal.items()]
    return f" ({', '.join(parts)})"
