"""The fault suite: ``python -m bench.faults [--only NAME ...]``.

Each scenario repeats one defect of the hardening issue against real processes (gateways, a
private Redis and PostgreSQL from :mod:`bench.fault_env`, started and stopped by the scenario)
and returns one :class:`Row`. The suite prints a table (scenario, requests answered, records
written, spend against budget, pass or fail) and exits 1 if any row fails.

Scenarios live in ``bench/faults_<area>.py`` modules, each exporting ``SCENARIOS``: a list of
``(name, function)`` pairs; a function takes no arguments and returns a :class:`Row`.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass

MODULES = ("bench.faults_money", "bench.faults_streams", "bench.faults_doors")


@dataclass
class Row:
    """One scenario's result.

    Attributes:
        scenario: its name.
        answered: requests the gateway answered (2xx).
        recorded: records written for them (decisions/outcomes in the store), or -1 if the
            scenario does not count records.
        spend: spend against budget, e.g. ``"$0.051 / $0.050"``, or ``""``.
        passed: whether the scenario's goal held.
        detail: one line on what was checked.
    """

    scenario: str
    answered: int
    recorded: int
    spend: str
    passed: bool
    detail: str = ""


Scenario = tuple[str, Callable[[], Row]]


def scenarios() -> list[Scenario]:
    """Every scenario of every module in :data:`MODULES` that exists."""
    found: list[Scenario] = []
    for name in MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        found.extend(module.SCENARIOS)
    return found


def _run(name: str, fn: Callable[[], Row]) -> Row:
    try:
        return fn()
    except Exception as exc:  # a crashed scenario is a failed row, and the suite goes on
        traceback.print_exc()
        return Row(name, 0, -1, "", False, f"crashed: {type(exc).__name__}: {exc}"[:200])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", default=[], help="run only scenarios whose name contains this")
    args = parser.parse_args(argv)
    chosen = [(n, f) for n, f in scenarios() if not args.only or any(o in n for o in args.only)]
    rows = []
    for name, fn in chosen:
        print(f"running {name} ...", file=sys.stderr, flush=True)
        rows.append(_run(name, fn))
    width = max([len(r.scenario) for r in rows] + [8])
    print(f"{'scenario':<{width}}  answered  recorded  {'spend / budget':<22}  result  detail")
    for r in rows:
        rec = "-" if r.recorded < 0 else str(r.recorded)
        print(f"{r.scenario:<{width}}  {r.answered:>8}  {rec:>8}  {r.spend:<22}  {'pass' if r.passed else 'FAIL':<6}  {r.detail}")
    return 0 if rows and all(r.passed for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
