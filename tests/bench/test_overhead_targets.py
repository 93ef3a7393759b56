"""Issue 41's gateway targets as bench/gateway_overhead.py judges them, on made-up rows."""

from bench.gateway_overhead import targets


def _row(name, c16, p50=1.0, p99=1.0, rss=300.0, errors=0):
    return {"setup": name, "c16_rps": c16, "c1_overhead_p50_ms": p50, "c1_overhead_p99_ms": p99,
            "peak_rss_mib": rss, "errors": errors}


def test_routed_is_compared_with_portkey_at_16_connections():
    rows = [_row("mixroute-routed", 700.0), _row("mixroute-passthrough", 1200.0), _row("portkey", 640.0)]
    found = {name: met for name, _, met in targets(rows)}
    assert found["routed rps (c=16) at least Portkey's pass-through rps"] is True
    rows[0]["c16_rps"] = 600.0
    found = {name: (measured, met) for name, measured, met in targets(rows)}
    measured, met = found["routed rps (c=16) at least Portkey's pass-through rps"]
    assert met is False and "600 vs 640" in measured


def test_without_portkey_the_target_is_not_measured():
    found = {name: met for name, _, met in targets([_row("mixroute-routed", 700.0)])}
    assert found["routed rps (c=16) at least Portkey's pass-through rps"] is None
    assert found["routed c=1 overhead p50 at most 3 ms"] is True
