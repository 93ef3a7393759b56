"""What each backend and route serves (``task``: ``chat`` or ``embedding``), and the policy
checks that keep the two apart.

A chat request must never reach an embedding model, nor an embeddings request a chat model:
the answer would be an upstream 400 or 404 at best, a vector or a text where the client
expects the other at worst. So a route's backends all serve one task, the default route
serves chat (clients that send no ``model`` expect a chat answer), a replay backend (recorded
chat answers) cannot serve embeddings, and a rule's ``route_to`` never sends a route's
requests to a backend of the other task. Each problem is reported at its policy line by
:func:`router.policy.loader.parse_policy`.
"""

from __future__ import annotations

from backends.config import BackendConfig
from router.policy.models import Policy, RouteConfig

Problem = tuple[tuple, str]
"""``(location in the policy, e.g. ("routes", 1, "backends", 0), message)``."""

#: The task each endpoint needs its backend to serve.
ENDPOINT_TASK = {"chat": "chat", "completions": "chat", "embeddings": "embedding"}
#: The endpoints of each task, for messages.
TASK_ENDPOINTS = {"chat": "/v1/chat/completions (and /v1/completions)", "embedding": "/v1/embeddings"}


def route_task(policy: Policy, route: RouteConfig) -> str:
    """The task of ``route``: its first backend's (validation keeps them all alike)."""
    first = policy.backend(route.backends[0])
    return first.task if first is not None else "chat"


def target_task(policy: Policy, route: RouteConfig | None, backend: BackendConfig | None) -> str:
    """The task of a request's resolved ``model``: a route's, or a pinned backend's."""
    if route is not None:
        return route_task(policy, route)
    return backend.task if backend is not None else "chat"


def wrong_task_message(policy: Policy, model: str, task: str, wanted: str) -> str:
    """The client's message when ``model`` (serving ``task``) is named where ``wanted`` is needed."""
    kind = {"chat": "a chat model", "embedding": "an embedding model"}
    names = [r.name for r in policy.routes if route_task(policy, r) == wanted]
    names += [b.name for b in policy.backends if b.task == wanted]
    return (f"The model '{model[:100]}' is {kind[task]}: send it to {TASK_ENDPOINTS[task]}; here name "
            f"{kind[wanted]} ({', '.join(names) or 'the policy has none'})")


def task_problems(policy: Policy) -> list[Problem]:
    """Routes mixing tasks, an embedding default route, replay embedding backends, and rules
    whose ``route_to`` crosses tasks (see the module docstring)."""
    problems: list[Problem] = []
    for i, b in enumerate(policy.backends):
        if b.task == "embedding" and b.kind == "replay":
            problems.append((("backends", i, "task"), "a replay backend answers from recorded chat answers and "
                                                      "cannot serve embeddings (kinds that can: fake, hosted, vllm)"))
    tasks: dict[str, str] = {}
    for i, r in enumerate(policy.routes):
        known = [(j, policy.backend(n)) for j, n in enumerate(r.backends) if policy.backend(n) is not None]
        if not known:
            continue
        first = known[0][1]
        tasks[r.name] = first.task
        for j, b in known[1:]:
            if b.task != first.task:
                problems.append((("routes", i, "backends", j),
                                 f"backend '{b.name}' serves {b.task}, but route '{r.name}' serves {first.task} (its "
                                 f"first backend '{first.name}'): a route's backends must all serve one task"))
    if tasks.get(policy.default_route) == "embedding":
        problems.append((("default_route",), f"route '{policy.default_route}' serves embeddings; the default route "
                                             "answers requests that name no model, which are chat requests: name a "
                                             "chat route"))
    for i, rule in enumerate(policy.rules):
        target = policy.backend(rule.route_to) if rule.route_to else None
        if target is None:
            continue
        if not rule.routes and target.task == "chat":
            continue  # it holds for chat routes; embeddings requests skip a route_to of a chat backend
        scope = rule.routes or [r.name for r in policy.routes]
        crossing = [name for name in scope if name in tasks and tasks[name] != target.task]
        if crossing:
            problems.append((("rules", i, "route_to"),
                             f"backend '{rule.route_to}' serves {target.task}, but the rule applies to route(s) "
                             f"{', '.join(crossing)}, which serve {tasks[crossing[0]]}: scope the rule with 'routes' "
                             "to routes of its task"))
    return problems
