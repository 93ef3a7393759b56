"""The fault suite: ``python -m bench.faults [--only NAME ...]``.

Each scenario repeats one defect of the hardening issue against real processes (gateways, a
private Redis and PostgreSQL from :mod:`bench.fault_env`, started and stopped by the scenario)
and returns one :class:`Row`. The suite prints a table (the issue's item, scenario, requests
answered, records written, spend against budget, pass or fail) and exits 1 if any row fails,
or if a full run has no scenario for one of the items 1 to :data:`ITEMS`.

Scenarios live in ``bench/faults_<area>.py`` modules, each exporting ``SCENARIOS``: a list of
``(name, item, function)``; ``item`` is the number of the issue's defect it repeats, and a
function takes no arguments and returns a :class:`Row`.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass

MODULES = ("bench.faults_money", "bench.faults_streams", "bench.faults_doors")
#: The hardening issue's defects are numbered 1 to ITEMS; each needs at least one scenario.
ITEMS = 12


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
        item: the issue's item it checks (set by the suite from ``SCENARIOS``).
    """

    scenario: str
    answered: int
    recorded: int
    spend: str
    passed: bool
    detail: str = ""
    item: int = 0

    def __post_init__(self) -> None:
        # A row built with its fields out of order must fail loudly, not print "pass".
        if not (isinstance(self.passed, bool) and isinstance(self.spend, str) and isinstance(self.detail, str)):
            raise TypeError(f"Row({self.scenario!r}, ...): fields out of order")


Scenario = tuple[str, int, Callable[[], Row]]


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


def _run(name: str, item: int, fn: Callable[[], Row]) -> Row:
    try:
        row = fn()
    except Exception as exc:  # a crashed scenario is a failed row, and the suite goes on
        traceback.print_exc()
        row = Row(name, 0, -1, "", False, f"crashed: {type(exc).__name__}: {exc}"[:200])
    row.item = item
    return row


def missing_items(found: list[Scenario]) -> list[int]:
    """The items 1 to :data:`ITEMS` no scenario checks."""
    covered = {item for _, item, _ in found}
    return [i for i in range(1, ITEMS + 1) if i not in covered]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", default=[], help="run only scenarios whose name contains this")
    args = parser.parse_args(argv)
    chosen = [s for s in scenarios() if not args.only or any(o in s[0] for o in args.only)]
    rows = []
    for name, item, fn in chosen:
        print(f"running {name} ...", file=sys.stderr, flush=True)
        rows.append(_run(name, item, fn))
    if not args.only:
        rows += [Row("(none)", 0, -1, "", False, "no scenario checks this item", item=i)
                 for i in missing_items(chosen)]
    width = max([len(r.scenario) for r in rows] + [8])
    print(f"item  {'scenario':<{width}}  answered  recorded  {'spend / budget':<22}  result  detail")
    for r in sorted(rows, key=lambda r: r.item):
        rec = "-" if r.recorded < 0 else str(r.recorded)
        print(f"{r.item:>4}  {r.scenario:<{width}}  {r.answered:>8}  {rec:>8}  {r.spend:<22}  "
              f"{'pass' if r.passed else 'FAIL':<6}  {r.detail}")
    return 0 if rows and all(r.passed for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
