"""Typed field building blocks of the policy's models: the backends' configuration
(:mod:`backends.config`) and the routing policy's (:mod:`router.policy.models`) share them, so
they stand on the floor."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict


def _number(value: Any) -> Any:
    # YAML `true` where a number belongs is a typo that pydantic's lax mode reads as 1.0.
    # Numeric strings stay accepted: PyYAML (YAML 1.1) reads a plain `1e-9` as a string.
    if isinstance(value, bool):
        raise ValueError(f"must be a number, not {value!r}")
    return value


def _integer(value: Any) -> Any:
    # PyYAML reads `window: 1e3` as the string "1e3", which int parsing rejects as "unable to
    # parse string as an integer": read it as the number it spells, so a whole value passes
    # and anything else gets the bound's or the fraction's own message.
    value = _number(value)
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return value
        return int(number) if number.is_integer() else number
    return value


#: A float field of the policy: finite (``Strict``), never a boolean.
Number = Annotated[float, BeforeValidator(_number)]
#: A whole-number field of the policy, never a boolean (lax mode read `context_tokens: true`
#: as a 1-token context window).
Integer = Annotated[int, BeforeValidator(_integer)]
#: The policy's ``version``: 1 (and not ``true``, which lax mode compares equal to 1).
Version = Annotated[Literal[1], BeforeValidator(_number)]

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/@-]{0,127}$"


class Strict(BaseModel):
    """Base of every policy model: unknown keys rejected, frozen, finite numbers only."""

    # allow_inf_nan=False: `.inf` / `.nan` (or 1e400) in a policy is a typo, never a price,
    # bar or SLO; an infinite willingness_to_pay made every decision fail.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
