"""Routers that ``mixroute eval`` compares, one module each, in a validated registry.

``random``, ``cheapest``, ``strongest``, ``zero`` (RouterBench's zero router: the NDCH of
the single models), ``oracle``, ``knn`` and ``mlp`` (on encoder embeddings), ``mf``
(RouteLLM-style matrix factorisation) and ``mixroute`` (the shipped heads + the decision
engine). :func:`get` builds one by name.
"""

from __future__ import annotations

from router.eval.routers.base import Context, EvalRouter, LearnedRouter, RouterRun, ScoreRouter

_REGISTRY: dict[str, type[EvalRouter]] = {}


def register(cls: type[EvalRouter]) -> type[EvalRouter]:
    """Add a router class under ``cls.name`` (a class decorator).

    Raises:
        ValueError: no name, a name already taken, or not an :class:`EvalRouter`.
    """
    if not (isinstance(cls, type) and issubclass(cls, EvalRouter)):
        raise ValueError(f"{cls!r} is not an EvalRouter subclass")
    if not cls.name or not cls.name.isidentifier():
        raise ValueError(f"router class {cls.__name__} needs a lower-case identifier `name`")
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"router name {cls.name!r} is taken by {_REGISTRY[cls.name].__name__}")
    _REGISTRY[cls.name] = cls
    return cls


def _load_builtin() -> None:
    # Importing registers them; this order is the report's order.
    from router.eval.routers import random, cheapest, strongest, zero, oracle, knn, mlp, mf, mixroute  # noqa: F401


def names() -> list[str]:
    """Registered router names, in the order they are reported."""
    _load_builtin()
    return list(_REGISTRY)


def get(name: str) -> EvalRouter:
    """A new router instance by name.

    Raises:
        KeyError: unknown name (the message lists the known ones).
    """
    _load_builtin()
    if name not in _REGISTRY:
        raise KeyError(f"unknown router {name!r} (known: {', '.join(sorted(_REGISTRY))})")
    return _REGISTRY[name]()


__all__ = ["Context", "EvalRouter", "LearnedRouter", "RouterRun", "ScoreRouter", "get", "names", "register"]
