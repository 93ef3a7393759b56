"""``mixroute logs export`` and ``mixroute logs prune`` on SQLite and PostgreSQL."""

from __future__ import annotations

import csv
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from gateway.cli import app
from gateway.commands.logs import parse_age, parse_time
from gateway.store import Store
from gateway.store.feedback import FeedbackRecord
from tests.store.conftest import rows, settings_for
from tests.store.records import T0, decision, outcome

NOW = datetime.now(timezone.utc)


async def _fill(url: str, tmp_path: Path) -> None:
    """r-old (200 days ago), r1 and r2 (an hour ago), r3 (now, no outcome yet)."""
    async with Store(settings_for(url), tmp_path / "j.jsonl") as store:
        old = NOW - timedelta(days=200)
        store.record_decision(decision("r-old", created_at=old))
        store.record_outcome(outcome("r-old", created_at=old + timedelta(seconds=1)))
        store.record_feedback(FeedbackRecord(request_id="r-old", score=1.0, created_at=NOW))
        for rid in ("r1", "r2"):
            store.record_decision(decision(rid, created_at=NOW - timedelta(hours=1)))
            written = {"tokens_cache_write": 12, "tokens_cache_write_1h": 4} if rid == "r1" else {}
            store.record_outcome(outcome(rid, created_at=NOW - timedelta(minutes=59), tokens_out=7, **written))
        store.record_decision(decision("r3", created_at=NOW))
        for score, label in ((0.0, "bad"), (1.0, "good"), (None, "good"), (0.5, None)):
            store.record_feedback(FeedbackRecord(request_id="r1", score=score, label=label))
        # orphan: an outcome whose decision never arrived, long ago
        store.record_outcome(outcome("r-orphan", created_at=NOW - timedelta(days=100)))


def _export(url: str, out: Path, fmt: str, *args: str) -> str:
    res = CliRunner().invoke(app, ["logs", "export", str(out), "--format", fmt, "--database-url", url, *args])
    assert res.exit_code == 0, res.output
    return res.output


async def test_export_joins_decisions_outcomes_and_feedback(db_url: str, tmp_path: Path) -> None:
    await _fill(db_url, tmp_path)
    out = tmp_path / "out" / "logs.jsonl"
    assert "3 request(s)" in _export(db_url, out, "jsonl", "--since", "2d", "--until", "now")
    got = {r["request_id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert list(got) == ["r1", "r2", "r3"]  # oldest first, r-old outside the window
    r1 = got["r1"]
    assert (r1["feedback_count"], r1["feedback_score_mean"], r1["feedback_labels"]) == (4, 0.5, ["bad", "good"])
    assert r1["tokens_out"] == 7 and r1["status"] == "ok" and r1["signals"]["domain"] == "code"
    assert (r1["tokens_cache_write"], r1["tokens_cache_write_1h"]) == (12, 4)
    assert (got["r2"]["tokens_cache_write"], got["r2"]["tokens_cache_write_1h"]) == (None, None)  # not reported
    assert datetime.fromisoformat(r1["created_at"]) == (NOW - timedelta(hours=1))
    assert (got["r2"]["feedback_count"], got["r2"]["feedback_score_mean"], got["r2"]["feedback_labels"]) == (
        0, None, [])
    assert got["r3"]["status"] is None and got["r3"]["outcome_at"] is None


async def test_export_to_standard_output(db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # "-" wrote a file named "-" in the working directory.
    await _fill(db_url, tmp_path)
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, ["logs", "export", "-", "--since", "2d", "--database-url", db_url])
    assert res.exit_code == 0, res.output
    assert [json.loads(line)["request_id"] for line in res.stdout.splitlines()] == ["r1", "r2", "r3"]
    assert "standard output: 3 request(s)" in res.stderr
    assert not (tmp_path / "-").exists()


async def test_export_csv_and_parquet_have_the_same_rows(db_url: str, tmp_path: Path) -> None:
    await _fill(db_url, tmp_path)
    _export(db_url, tmp_path / "a.csv", "csv")
    with open(tmp_path / "a.csv", newline="") as fh:
        table = list(csv.DictReader(fh))
    assert [r["request_id"] for r in table] == ["r-old", "r1", "r2", "r3"]
    assert json.loads(table[1]["feedback_labels"]) == ["bad", "good"] and table[1]["feedback_score_mean"] == "0.5"
    assert json.loads(table[1]["candidates"])[0]["backend"] == "fake-small" and table[3]["tokens_out"] == ""
    assert (table[1]["tokens_cache_write"], table[1]["tokens_cache_write_1h"], table[2]["tokens_cache_write"]) == (
        "12", "4", "")

    pq = pytest.importorskip("pyarrow.parquet", reason="parquet export needs pyarrow (mixroute[export])")
    _export(db_url, tmp_path / "a.parquet", "parquet")
    data = pq.read_table(tmp_path / "a.parquet").to_pylist()
    assert [r["request_id"] for r in data] == ["r-old", "r1", "r2", "r3"]
    assert data[1]["feedback_labels"] == ["bad", "good"] and data[1]["feedback_count"] == 4
    assert data[1]["created_at"] == NOW - timedelta(hours=1)
    assert (data[1]["tokens_cache_write"], data[1]["tokens_cache_write_1h"], data[2]["tokens_cache_write"]) == (
        12, 4, None)
    assert json.loads(data[1]["signals"]) == {"domain": "code", "difficulty": 0.3}


async def test_prune_deletes_whole_old_requests_and_orphans(db_url: str, tmp_path: Path) -> None:
    await _fill(db_url, tmp_path)
    runner = CliRunner()
    dry = runner.invoke(app, ["logs", "prune", "--older-than", "90d", "--dry-run", "--database-url", db_url])
    assert dry.exit_code == 0 and "would delete 1 decision(s), 2 outcome(s), 1 feedback" in dry.output
    assert rows(db_url, "SELECT count(*) FROM decisions") == [(4,)]
    res = runner.invoke(app, ["logs", "prune", "--older-than", "90d", "--database-url", db_url])
    assert res.exit_code == 0 and "deleted 1 decision(s), 2 outcome(s), 1 feedback" in res.output, res.output
    assert rows(db_url, "SELECT request_id FROM decisions ORDER BY request_id") == [("r1",), ("r2",), ("r3",)]
    assert rows(db_url, "SELECT request_id FROM outcomes ORDER BY request_id") == [("r1",), ("r2",)]
    assert rows(db_url, "SELECT count(*) FROM feedback WHERE request_id = 'r-old'") == [(0,)]


async def test_the_format_follows_outs_suffix_and_a_contradiction_is_refused(db_url: str, tmp_path: Path) -> None:
    """From a break-it pass: `logs export logs.parquet` (no --format) wrote JSON lines into a
    file named .parquet, which `policy what-if --logs logs.parquet` then could not read."""
    await _fill(db_url, tmp_path)
    out = tmp_path / "logs.csv"
    res = CliRunner().invoke(app, ["logs", "export", str(out), "--since", "2d", "--database-url", db_url])
    assert res.exit_code == 0, res.output
    assert out.read_text().splitlines()[0].startswith("request_id,")  # a CSV header, not a JSON object
    bad = CliRunner().invoke(app, ["logs", "export", str(tmp_path / "logs.parquet"), "-f", "jsonl",
                                   "--database-url", db_url])
    assert bad.exit_code == 2 and "is named for parquet" in bad.output and bad.output.count("\n") == 1
    assert not (tmp_path / "logs.parquet").exists()


def test_bad_arguments_exit_2(tmp_path: Path) -> None:
    runner = CliRunner()
    url = f"sqlite:///{tmp_path / 'x.db'}"
    bad_fmt = runner.invoke(app, ["logs", "export", str(tmp_path / "o"), "--format", "xlsx", "--database-url", url])
    assert bad_fmt.exit_code == 2 and "xlsx" in bad_fmt.output
    bad_time = runner.invoke(app, ["logs", "export", str(tmp_path / "o"), "--since", "yesterday-ish",
                                   "--database-url", url])
    assert bad_time.exit_code == 2 and "not a time" in bad_time.output
    bad_age = runner.invoke(app, ["logs", "prune", "--older-than", "90 days", "--database-url", url])
    assert bad_age.exit_code == 2 and "not an age" in bad_age.output
    assert not (tmp_path / "o").exists()


def test_export_of_an_unreachable_database_exits_1(tmp_path: Path) -> None:
    out = tmp_path / "o.jsonl"
    res = CliRunner().invoke(app, ["logs", "export", str(out), "--database-url",
                                   "postgresql://u:hunter2@127.0.0.1:1/x?connect_timeout=2"])
    assert res.exit_code == 1 and "OperationalError" in res.output and "hunter2" not in res.output
    assert not out.exists() and not list(tmp_path.iterdir())  # no partial file


@given(st.integers(0, 10**4), st.sampled_from("smhdw"))
def test_parse_age_round_trip(n: int, unit: str) -> None:
    seconds = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}[unit]
    assert parse_age(f"{n}{unit}") == timedelta(seconds=n * seconds)
    assert parse_time(f"{n}{unit}", now=T0) == T0 - timedelta(seconds=n * seconds)


@given(st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2999, 1, 1),
                    timezones=st.none() | st.timezones()))
def test_parse_time_iso_is_utc(value: datetime) -> None:
    text = value.isoformat()  # an offset, when there is one, is fixed in the text
    got = parse_time(text)
    assert got.tzinfo == timezone.utc
    parsed = datetime.fromisoformat(text)
    assert got == (parsed.replace(tzinfo=timezone.utc) if parsed.tzinfo is None else parsed)
