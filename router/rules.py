"""Policy rules, evaluated before scoring (see :class:`router.policy.models.RuleConfig`).

Errors::

    PromptBlocked       400 invalid_request_error  prompt_blocked
    BackendNotAllowed   403 permission_error       backend_not_allowed  (pinned requests)
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from backends.config import BackendConfig
from router.errors import BackendNotAllowed, InvalidRequest
from router.policy.models import Policy, RouteConfig, RuleConfig


class PromptBlocked(InvalidRequest):
    code = "prompt_blocked"


@dataclass
class RuleResult:
    """What the rules left: candidate backends, the cost limits (USD) and one note per rule
    applied. ``max_cost_usd`` caps the expected cost (``max_cost_mode: expected``) and
    ``hard_cost_usd`` the most a call may cost (``max_cost_mode: hard``); each is the lowest
    of its matching rules', ``None`` without one."""

    backends: list[BackendConfig]
    max_cost_usd: float | None = None
    hard_cost_usd: float | None = None
    notes: list[str] = field(default_factory=list)

    def limit_cost(self, rule: RuleConfig) -> None:
        """Take ``rule``'s ``max_cost_usd`` (if any) into the limit of its mode."""
        if rule.max_cost_usd is None:
            return
        cap = float(rule.max_cost_usd)
        if rule.max_cost_mode == "hard":
            self.hard_cost_usd = cap if self.hard_cost_usd is None else min(cap, self.hard_cost_usd)
        else:
            self.max_cost_usd = cap if self.max_cost_usd is None else min(cap, self.max_cost_usd)


def matching(policy: Policy, route: RouteConfig | None, tenant: str | None, headers: dict[str, str],
             signals: dict[str, Any], pinned: BackendConfig | None = None) -> Iterator[RuleConfig]:
    """The rules whose conditions hold for this request, in policy order. For a request
    pinned to a backend (``route`` is ``None``), a rule scoped to ``routes`` holds when the
    backend belongs to one of them: a route's rules govern its backends however they are
    named."""
    for rule in policy.rules:
        if rule.routes and route is not None and route.name not in rule.routes:
            continue
        if rule.routes and route is None and not any(
                pinned is not None and pinned.name in r.backends for r in policy.routes if r.name in rule.routes):
            continue
        if rule.tenants and tenant not in rule.tenants:
            continue
        if rule.when_header and rule.when_header.lower() not in headers:
            continue
        if not _signals_hold(rule, signals):
            continue
        yield rule


def _signals_hold(rule: RuleConfig, signals: dict[str, Any]) -> bool:
    """Every ``when_signal`` is at least, and every ``when_signal_below`` strictly below, its
    threshold; a missing or non-number signal satisfies neither."""
    def number(name: str) -> float | None:
        value = signals.get(name)
        return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    return (all((v := number(n)) is not None and v >= t for n, t in rule.when_signal.items())
            and all((v := number(n)) is not None and v < t for n, t in rule.when_signal_below.items()))


def apply_rules(policy: Policy, route: RouteConfig, backends: list[BackendConfig], tenant: str | None,
                headers: dict[str, str], signals: dict[str, Any]) -> RuleResult:
    """Apply every matching rule's actions to ``backends``: any ``block`` refuses; the
    first ``route_to`` replaces the candidates (a named backend may be outside the route,
    e.g. a hardened model); then every ``allow_backends`` and ``require_tags`` filters what
    is left, so no ``route_to`` escapes a tenant's allow list; ``max_cost_usd`` caps take
    the lowest of each ``max_cost_mode`` (:class:`RuleResult`).

    Raises:
        PromptBlocked: a matching rule has ``block: true``.
    """
    result = RuleResult(backends=list(backends))
    rules = list(matching(policy, route, tenant, headers, signals))
    for rule in rules:
        if rule.block:
            raise PromptBlocked(f"The request was blocked by the policy rule '{rule.name}'{_why(rule, signals)}")
    # route_to first (the first matching one wins), then every filter on what it left: a
    # later route_to must not undo a tenant's allow list, whatever the rules' order.
    for rule in rules:
        if rule.route_to:
            result.backends = [policy.backend(rule.route_to)]
            result.notes.append(f"{rule.name}: route to {rule.route_to}{_why(rule, signals)}")
            break
    for rule in rules:
        why = _why(rule, signals)
        if rule.allow_backends:
            result.backends = [b for b in result.backends if b.name in rule.allow_backends]
            result.notes.append(f"{rule.name}: allow {rule.allow_backends}{why}")
        if rule.require_tags:
            result.backends = [b for b in result.backends if set(rule.require_tags) <= set(b.tags)]
            result.notes.append(f"{rule.name}: require tags {rule.require_tags}{why}")
        if rule.max_cost_usd is not None:
            result.limit_cost(rule)
            result.notes.append(f"{rule.name}: max cost {rule.max_cost_usd} USD"
                                + (" (hard)" if rule.max_cost_mode == "hard" else ""))
    return result


def _why(rule: RuleConfig, signals: dict[str, Any]) -> str:
    parts = [f"{k}={signals[k]:.2f}>={v}" for k, v in rule.when_signal.items()]
    parts += [f"{k}={signals[k]:.2f}<{v}" for k, v in rule.when_signal_below.items()]
    if not parts:
        return ""
    return f" ({', '.join(parts)})"


def pinned_rules(policy: Policy, backend: BackendConfig, tenant: str | None, headers: dict[str, str],
                 signals: dict[str, Any]) -> RuleResult:
    """Apply the rules to a request whose ``model`` names ``backend``: the same rules as a
    routed request (see :func:`matching`), but a pinned backend is never replaced, so a rule
    that would route elsewhere or filter it out refuses the request instead.

    Raises:
        PromptBlocked: a matching rule has ``block: true``.
        BackendNotAllowed: a matching rule's ``route_to``, ``allow_backends`` or
            ``require_tags`` excludes ``backend``.
    """
    result = RuleResult(backends=[backend])
    for rule in matching(policy, None, tenant, headers, signals, pinned=backend):
        why = _why(rule, signals)
        if rule.block:
            raise PromptBlocked(f"The request was blocked by the policy rule '{rule.name}'{why}")
        if (rule.route_to and rule.route_to != backend.name
                or rule.allow_backends and backend.name not in rule.allow_backends
                or rule.require_tags and not set(rule.require_tags) <= set(backend.tags)):
            raise BackendNotAllowed(f"The policy rule '{rule.name}'{why} does not allow backend '{backend.name}' "
                                    f"for this request", param="model")
        result.limit_cost(rule)
        result.notes.append(rule.name + why)
    return result


def needs_signals(policy: Policy, backend: BackendConfig) -> bool:
    """Whether any rule that could hold for a request pinned to ``backend`` reads a signal
    (then the classifier must run; otherwise the pinned path skips it)."""
    return any(rule.when_signal or rule.when_signal_below for rule in policy.rules
               if not rule.routes or any(backend.name in r.backends for r in policy.routes if r.name in rule.routes))
