"""The fault suite's table (``python -m bench.faults``): every item of the hardening issue has
a scenario, and a full run reports an item without one as a failed row."""

from __future__ import annotations

from bench import faults


def test_every_item_of_the_issue_has_a_scenario() -> None:
    found = faults.scenarios()
    assert faults.missing_items(found) == []
    assert {item for _, item, _ in found} == set(range(1, faults.ITEMS + 1))
    assert len({name for name, _, _ in found}) == len(found)


def test_a_run_without_a_scenario_for_an_item_fails(monkeypatch, capsys) -> None:
    def passing() -> faults.Row:
        return faults.Row("only one", 1, 1, "", True, "fine")

    monkeypatch.setattr(faults, "scenarios", lambda: [("only one", 3, passing)])
    assert faults.main([]) == 1
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:2] == ["item", "scenario"]
    rows = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert "pass" in rows["3"] and "FAIL" in rows["1"] and "FAIL" in rows["12"]
    monkeypatch.setattr(faults, "ITEMS", 3)
    monkeypatch.setattr(faults, "scenarios", lambda: [("s", i, passing) for i in (1, 2, 3)])
    assert faults.main([]) == 0
