"""``mixroute policy what-if`` on an exported log (jsonl), re-decided by the real engine."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from gateway.cli import app
from router.eval.whatif import Logged, what_if
from router.policy import parse_policy
from tests.foreign_sqlite import foreign_sqlite

runner = CliRunner()


def _policy(target: float, large_price: float = 0.02) -> str:
    return f"""
version: 1
default_route: auto
backends:
  - {{name: small, kind: fake, model: small-model, pricing: {{per_request: 0.001}}}}
  - {{name: large, kind: fake, model: large-model, pricing: {{per_request: {large_price}}}}}
routes:
  - {{name: auto, backends: [small, large], quality_bar: {{target: {target}}}}}
"""


def _log(n: int = 40, probability: float = 1.0) -> list[dict]:
    rows = []
    for i in range(n):
        q_small = 0.9 if i % 2 == 0 else 0.6  # even requests are easy
        chosen = "small" if q_small >= 0.95 * 0.92 else "large"
        rows.append({
            "request_id": f"r{i}", "created_at": f"2026-11-{1 + i % 28:02d}T10:00:00+00:00", "route": "auto",
            "chosen": chosen, "probability": probability, "pinned": False, "tenant": None, "endpoint": "chat",
            "candidates": [
                {"backend": "small", "model": "small-model", "predicted_quality": q_small, "expected_cost_usd": 0.001,
                 "expected_output_tokens": 100},
                {"backend": "large", "model": "large-model", "predicted_quality": 0.92, "expected_cost_usd": 0.02,
                 "expected_output_tokens": 100}],
            "signals": {}, "tokens_in": 50, "tokens_out": 100, "cost_usd": 0.001 if chosen == "small" else 0.02,
            "feedback_score_mean": 1.0 if (chosen == "large" or i % 2 == 0) else 0.0,
        })
    return rows



def _policy_and_log(tmp_path):
    """``(new.yaml, export.jsonl)``: the policy at 0.6 and the default logged rows as JSON lines."""
    pol = tmp_path / "new.yaml"
    pol.write_text(_policy(0.6))
    log = tmp_path / "export.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in _log()))
    return pol, log

def test_a_lower_bar_moves_hard_requests_to_the_cheap_backend():
    rows = [Logged.from_row(r) for r in _log()]
    assert {r.chosen for r in rows} == {"small", "large"}
    result = what_if(parse_policy(_policy(0.6)), rows, bootstrap=50)
    assert result.n == 40 and result.changed == pytest.approx(0.5)
    assert result.moves == {("large", "small"): 20}
    assert result.new["cost"] < result.old["cost"] and result.new["quality"] < result.old["quality"]
    assert result.delta_ci["cost"][1] < 0
    assert result.ipw is None and "deterministic" in result.ipw_note
    assert "50% of 40 logged requests" in result.summary()


def test_same_policy_changes_nothing():
    rows = [Logged.from_row(r) for r in _log()]
    result = what_if(parse_policy(_policy(0.95)), rows, bootstrap=20)
    assert result.changed == 0.0 and result.new == result.old


def test_same_policy_changes_nothing_with_token_prices_either():
    """Token-priced backends: the logged expected cost came from the gateway's estimate of
    the prompt (and a warm prefix), the re-decision from the outcome's tokens_in. An
    unchanged choice must still contribute exactly 0 (it used to report a non-zero 95% CI)."""
    policy = _policy(0.95).replace("{per_request: 0.001}", "{input_per_1m: 1, output_per_1m: 2}") \
        .replace("{per_request: 0.02}", "{input_per_1m: 20, output_per_1m: 40}")
    rows = []
    for r in _log():
        for c in r["candidates"]:
            c["expected_cost_usd"] *= 0.7  # as if part of the prompt had been predicted to hit a prefix cache
        rows.append(Logged.from_row(r))
    result = what_if(parse_policy(policy), rows, bootstrap=50)
    assert result.changed == 0.0 and result.new == result.old
    assert result.delta_ci["cost"] == [0.0, 0.0] and result.delta_ci["quality"] == [0.0, 0.0]


def test_ipw_when_the_log_randomised():
    rows = [Logged.from_row(r) for r in _log(probability=0.5)]
    result = what_if(parse_policy(_policy(0.95)), rows, bootstrap=20)
    assert result.ipw == pytest.approx(1.0) and result.ipw_ci is not None


def test_cli_reads_an_export_file_and_writes_json(tmp_path):
    log = tmp_path / "export.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in _log()))
    pol = tmp_path / "new.yaml"
    pol.write_text(_policy(0.6))
    res = runner.invoke(app, ["policy", "what-if", str(pol), "--logs", str(log), "--since", "2026-11-15",
                              "--json", str(tmp_path / "w.json"), "--bootstrap", "20"])
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "w.json").read_text())
    assert doc["n"] < 40 and doc["moves"][0]["from"] == "large"
    assert "would go to another backend" in res.output


def test_cli_names_a_missing_log(tmp_path):
    pol = tmp_path / "new.yaml"
    pol.write_text(_policy(0.6))
    res = runner.invoke(app, ["policy", "what-if", str(pol), "--logs", str(tmp_path / "nope.jsonl")])
    assert res.exit_code == 2 and "nope.jsonl" in res.output
    # From a fresh-user pass: a folder, no --logs with no store, and a window in the future.
    res = runner.invoke(app, ["policy", "what-if", str(pol), "--logs", str(tmp_path)])
    assert res.exit_code == 2 and "is a folder" in res.output
    res = runner.invoke(app, ["policy", "what-if", str(pol)], env={"MIXROUTE_DATABASE_URL": f"sqlite:///{tmp_path}/no.db"})
    assert res.exit_code == 2 and "None" not in res.output and "the store (MIXROUTE_DATABASE_URL)" in res.output
    res = runner.invoke(app, ["policy", "what-if", str(pol), "--logs", str(pol), "--since", "2999-01-01"])
    assert res.exit_code == 2 and "--until must be after --since (--since 2999-01-01" in res.output
    assert "--until now is" in res.output


def test_cli_reads_the_store(tmp_path):
    """The same log written to a real SQLite store and read back through the export query."""
    from datetime import datetime, timezone

    from sqlalchemy import create_engine

    from gateway.store import upgrade
    from gateway.store.upsert import write_items
    from router.records import DecisionRecord, OutcomeRecord

    url = f"sqlite:///{tmp_path / 'store.db'}"
    upgrade(url)
    engine = create_engine(url)
    items = []
    for r in _log(10):
        at = datetime.fromisoformat(r["created_at"]).astimezone(timezone.utc)
        items.append(("decisions", DecisionRecord(
            request_id=r["request_id"], route="auto", policy_hash="p0", chosen=r["chosen"], reason="cheapest_above_bar",
            candidates=r["candidates"], created_at=at).as_dict()))
        items.append(("outcomes", OutcomeRecord(
            request_id=r["request_id"], backend=r["chosen"], model=r["chosen"], status="ok", http_status=200,
            tokens_in=50, tokens_out=100, cost_usd=r["cost_usd"], created_at=at).as_dict()))
    with engine.begin() as conn:
        write_items(conn, items)
    engine.dispose()
    pol = tmp_path / "new.yaml"
    pol.write_text(_policy(0.6))
    store = tmp_path / "store.db"
    before = store.read_bytes()
    # The URL, and the file's plain path (it was read as JSON lines: "line 1: Expecting value").
    for logs in (url, str(store)):
        res = runner.invoke(app, ["policy", "what-if", str(pol), "--logs", logs, "--bootstrap", "20"])
        assert res.exit_code == 0, (logs, res.output)
        assert "10 logged request(s)" in res.output and "50% of 10 logged requests" in res.output
    assert store.read_bytes() == before  # opened read-only


def test_cli_bad_logs_bootstrap_and_output_are_one_line_errors(tmp_path):
    """Found by a new-user pass: each of these was a traceback."""
    pol, log = _policy_and_log(tmp_path)
    res = runner.invoke(app, ["policy", "what-if", str(pol), "--logs", str(log), "--bootstrap", "0",
                              "--json", str(tmp_path / "new" / "dir" / "w.json")])
    assert res.exit_code == 0, res.output  # 0 resamples: the interval is the point estimate
    doc = json.loads((tmp_path / "new" / "dir" / "w.json").read_text())
    assert doc["delta_ci"]["cost"][0] == doc["delta_ci"]["cost"][1]
    for args, needle in (
        (["--logs", f"sqlite:///{tmp_path}/none.db"], "no such SQLite database file"),
        (["--logs", "bogus://x"], "cannot read the store"),
        (["--logs", str(log), "--bootstrap", "-3"], "--bootstrap"),
        (["--logs", str(log), "--since", "2026-11-20", "--until", "2026-11-10"], "--until must be after --since"),
        (["--logs", str(log), "--since", "2026-11-10", "--until", "2026-11-10"], "--until must be after --since"),
        (["--logs", str(log), "--json", str(tmp_path)], "is a folder"),
        (["--logs", str(log), "--json", str(log / "w.json")], "is not a folder"),
    ):
        res = runner.invoke(app, ["policy", "what-if", str(pol), *args])
        assert res.exit_code == 2 and needle in res.output and "Traceback" not in res.output, (args, res.output)
        if needle.startswith(("--until", "no such")):
            assert res.output.count("\n") == 1, (args, res.output)
    assert not (tmp_path / "none.db").exists()  # a missing store is not created
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"a": 1}\n{"b": 2}\n{bad\n')
    res = runner.invoke(app, ["policy", "what-if", str(pol), "--logs", str(bad)])
    assert res.exit_code == 2 and "line 3" in res.output


@pytest.mark.parametrize("change, needle", [
    ({"tokens_in": 1e300}, "'tokens_in'"),
    ({"tokens_in": -5}, "'tokens_in'"),
    ({"tokens_in": "x"}, "'tokens_in'"),
    ({"probability": "abc"}, "'probability'"),
    ({"candidates": "oops"}, "'candidates'"),
    ({"candidates": [1]}, "'candidates'"),
    ({"candidates": {"a": 1}}, "'candidates'"),
    ({"candidates": [{"backend": "small", "predicted_quality": "hi"}]}, "'candidates'"),
    ({"signals": [1]}, "'signals'"),
])
def test_cli_names_the_request_and_column_of_a_damaged_row(tmp_path, change, needle):
    """From a new-user pass: a huge tokens_in was an OverflowError traceback; a malformed
    candidates or signals column made every request 'not re-decided' with no reason given;
    a bad number said only "could not convert string to float"."""
    pol = tmp_path / "new.yaml"
    pol.write_text(_policy(0.6))
    rows = _log(3)
    rows[1].update(change)
    log = tmp_path / "export.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = runner.invoke(app, ["policy", "what-if", str(pol), "--logs", str(log), "--bootstrap", "0"])
    assert res.exit_code == 2, res.output
    assert "request r1" in res.output and needle in res.output and "Traceback" not in res.output, res.output


def test_cli_a_jsonl_line_that_is_not_an_object_is_named(tmp_path):
    """It was an AttributeError traceback ('list' object has no attribute 'get')."""
    pol = tmp_path / "new.yaml"
    pol.write_text(_policy(0.6))
    log = tmp_path / "export.jsonl"
    log.write_text(json.dumps(_log(1)[0]) + "\n[1, 2]\n")
    res = runner.invoke(app, ["policy", "what-if", str(pol), "--logs", str(log)])
    assert res.exit_code == 2 and "line 2" in res.output and "JSON object" in res.output, res.output


def test_nothing_re_decided_says_why():
    """With every request skipped the summary said only 'No logged request could be
    re-decided' and hid the reasons it prints otherwise."""
    rows = [Logged.from_row({**r, "pinned": True}) for r in _log(4)]
    result = what_if(parse_policy(_policy(0.6)), rows, bootstrap=0)
    assert result.n == 0 and "4 pinned" in result.summary()
    # From a break-it pass: the figures were 0.0, which reads as a measured zero.
    assert result.old == result.new == {"quality": None, "cost": None} and result.changed is None
    assert result.delta_ci == {"quality": None, "cost": None}


def test_cli_with_no_request_writes_nulls(tmp_path):
    pol, log = _policy_and_log(tmp_path)
    res = runner.invoke(app, ["policy", "what-if", str(pol), "--logs", str(log), "--since", "2030-01-01",
                              "--until", "2030-02-01", "--json", str(tmp_path / "w.json")])
    assert res.exit_code == 0, res.output
    assert "0 logged request(s)" in res.output and "There were no logged requests to re-decide." in res.output
    doc = json.loads((tmp_path / "w.json").read_text())
    assert doc["n"] == 0 and doc["changed"] is None and doc["moves"] == []
    assert doc["old"] == doc["new"] == doc["delta_ci"] == {"quality": None, "cost": None}


@pytest.mark.parametrize("content", ["tables", "empty"])
@pytest.mark.parametrize("form", ["url", "path"])
def test_cli_leaves_a_foreign_sqlite_file_as_it_was(tmp_path, content, form):
    """From a break-it pass: --logs sqlite:///X opened X read-write (a non-mixroute or empty
    file was left in WAL mode with -wal/-shm files), and a plain path to it was read as JSON
    lines ("line 1: Expecting value")."""
    pol = tmp_path / "new.yaml"
    pol.write_text(_policy(0.6))
    folder = tmp_path / "other"
    folder.mkdir()
    db = foreign_sqlite(folder / "other.db", content)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    res = runner.invoke(app, ["policy", "what-if", str(pol), "--logs", f"sqlite:///{db}" if form == "url" else str(db)])
    assert res.exit_code == 2, res.output
    assert res.output.count("\n") == 1 and "Traceback" not in res.output and "Expecting value" not in res.output
    assert ("not a mixroute store" if content == "tables" else "never migrated") in res.output
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before


def test_a_renamed_route_is_counted_as_refused_not_sent_to_the_default_route():
    """From a break-it pass: renaming route `auto` (and the default route with it) reported
    the same moves and savings, while every client naming `auto` would get a 404."""
    rows = [Logged.from_row(r) for r in _log(6)]
    renamed = _policy(0.6).replace("default_route: auto", "default_route: other").replace("name: auto", "name: other")
    result = what_if(parse_policy(renamed), rows, bootstrap=0)
    assert result.n == 0 and result.skipped == {"route not in the new policy (404 for clients that name it)": 6}
    assert "6 route not in the new policy" in result.summary()


def test_the_summary_says_how_many_moves_it_leaves_out():
    """From a break-it pass: the summary listed the 5 largest moves and dropped the rest silently."""
    from router.eval.whatif import WhatIf

    moves = {(f"b{i}", "x"): 1 for i in range(7)}
    w = WhatIf(n=10, skipped={}, old={"quality": 0.5, "cost": 1.0}, new={"quality": 0.5, "cost": 1.0},
               delta_ci={"quality": [0.0, 0.0], "cost": [0.0, 0.0]}, logged_cost=None, ipw=None, ipw_ci=None,
               ipw_note="", changed=0.7, moves=moves)
    text = w.summary()
    assert text.count(" -> x") == 5 and "... and 2 more request(s) in 2 other move(s)" in text


def test_logged_embeddings_are_counted_not_re_decided():
    """An embeddings request has no quality to compare: the cheapest embedding backend answers."""
    rows = [Logged.from_row({**r, "endpoint": "embeddings"}) for r in _log(4)] + [Logged.from_row(r) for r in _log(2)]
    result = what_if(parse_policy(_policy(0.6)), rows, bootstrap=0)
    assert result.n == 2 and result.skipped == {"embeddings": 4}
