"""The door parity bench's verdicts (bench/doors.py), on made-up rows: no load is run."""

from bench.doors import door_targets


def _row(door, rps, p50=1.0, note=""):
    return {"door": door, "note": note} if note else {"door": door, "note": "", "rps": rps, "c1_overhead_p50_ms": p50}


def test_doors_within_15_percent_and_a_cheap_session_lookup_are_met():
    rows = [_row("chat", 1000), _row("responses", 900), _row("messages", 870), _row("chat+session", 990, p50=1.2)]
    assert [met for _, _, met in door_targets(rows)] == [True, True]


def test_a_slow_door_a_skipped_door_and_a_slow_lookup_are_missed():
    rows = [_row("chat", 1000), _row("responses", 800), _row("messages", 0, note="not served by this app (HTTP 404)"),
            _row("chat+session", 990, p50=1.5)]
    found = door_targets(rows)
    assert [met for _, _, met in found] == [False, False, False]
    assert "messages" in found[1][1] and "+0.50 ms" in found[2][1]


def test_one_door_cannot_be_compared():
    found = door_targets([_row("chat", 1000)])
    assert found[0][2] is None
