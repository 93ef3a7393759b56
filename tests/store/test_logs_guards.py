"""``mixroute logs``: an empty --since/--until window, a store that was never migrated (or
is not a mixroute store, or no SQLite file at all) and a prune reaching into the last day
are refused with one clear line; ``export`` leaves the SQLite file it reads as it was."""

from __future__ import annotations

import sqlite3
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gateway.cli import app
from gateway.store import Store, upgrade
from tests.foreign_sqlite import foreign_sqlite
from tests.store.conftest import rows, settings_for
from tests.store.records import decision, outcome


def _run(*args: str):
    return CliRunner().invoke(app, ["logs", *args])


@pytest.fixture
async def filled(tmp_path: Path) -> str:
    """A migrated SQLite store: r-day (2 days old) and r-now (a minute old)."""
    url = f"sqlite:///{tmp_path / 'logs.db'}"
    now = datetime.now(timezone.utc)
    async with Store(settings_for(url), tmp_path / "j.jsonl") as store:
        for rid, at in (("r-day", now - timedelta(days=2)), ("r-now", now - timedelta(minutes=1))):
            store.record_decision(decision(rid, created_at=at))
            store.record_outcome(outcome(rid, created_at=at + timedelta(seconds=1)))
    return url


@pytest.mark.parametrize("since, until", [("2026-11-02", "2026-11-01"), ("2026-11-01", "2026-11-01")])
def test_an_empty_window_exits_2(tmp_path: Path, since: str, until: str):
    """From a break-it pass: --since equal to --until wrote an empty file (what-if refused it)."""
    out = tmp_path / "o.jsonl"
    res = _run("export", str(out), "--since", since, "--until", until,
               "--database-url", f"sqlite:///{tmp_path / 'x.db'}")
    assert res.exit_code == 2, res.output
    assert res.stderr.count("\n") == 1 and "--until must be after --since" in res.stderr
    assert f"--since {since} is {since}T00:00:00+00:00" in res.stderr
    assert not out.exists() and not (tmp_path / "x.db").exists()


@pytest.mark.parametrize("command", ["export", "prune"])
def test_never_migrated_database_says_run_db_upgrade(tmp_path: Path, command: str):
    """Exit 2 like other bad input (it was 1, the code of an unreachable database)."""
    db = tmp_path / "empty.db"
    sqlite3.connect(db).close()  # an existing file without tables
    args = [str(tmp_path / "o.jsonl")] if command == "export" else ["--dry-run"]
    res = _run(command, *args, "--database-url", f"sqlite:///{db}")
    assert res.exit_code == 2
    assert "never migrated" in res.stderr and "run `mixroute db upgrade` first" in res.stderr
    assert res.stderr.count("\n") == 1
    assert "no such table" not in res.output and "Traceback" not in res.output


def _sqlite_files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.name.startswith("other.db")}


@pytest.mark.parametrize("command", ["export", "prune"])
@pytest.mark.parametrize("content", ["tables", "empty"])
def test_a_foreign_sqlite_file_is_refused_as_it_was(tmp_path: Path, content: str, command: str):
    """From a break-it pass: export opened SQLite read-write, so another program's database
    (or an empty file) was switched to WAL mode and got -wal/-shm files. Prune writes, but
    checks the database read-only before it does."""
    folder = tmp_path / "other"
    folder.mkdir()
    db = foreign_sqlite(folder / "other.db", content)
    before = _sqlite_files(folder)
    args = [str(tmp_path / "o.jsonl")] if command == "export" else ["--older-than", "30d"]
    res = _run(command, *args, "--database-url", f"sqlite:///{db}")
    assert res.exit_code == 2, res.output
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.output
    if content == "tables":
        assert "not a mixroute store: it has tables (notes)" in res.stderr
    else:
        assert "never migrated" in res.stderr
    assert _sqlite_files(folder) == before  # same bytes, journal mode included; no -wal/-shm
    assert not (tmp_path / "o.jsonl").exists()


def test_export_of_a_store_does_not_write_to_its_file(filled: str, tmp_path: Path):
    path = Path(filled.removeprefix("sqlite:///"))
    before = path.read_bytes()
    out = tmp_path / "o.jsonl"
    res = _run("export", str(out), "--database-url", filled)
    assert res.exit_code == 0, res.output
    assert len(out.read_text().splitlines()) == 2 and path.read_bytes() == before


def test_a_file_that_is_not_sqlite_is_one_line(tmp_path: Path):
    junk = tmp_path / "notes.db"
    junk.write_text("not a database")
    res = _run("export", str(tmp_path / "o.jsonl"), "--database-url", f"sqlite:///{junk}")
    assert res.exit_code == 2 and "is not a SQLite database" in res.stderr, res.output
    assert junk.read_text() == "not a database"


def test_missing_sqlite_file_is_not_created(tmp_path: Path):
    res = _run("export", str(tmp_path / "o.jsonl"), "--database-url", f"sqlite:///{tmp_path / 'none.db'}")
    assert res.exit_code == 2 and "no such SQLite database file" in res.stderr, res.output
    assert not (tmp_path / "none.db").exists()


def test_older_revision_says_run_db_upgrade(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'old.db'}"
    upgrade(url, "0001")
    res = _run("export", str(tmp_path / "o.jsonl"), "--database-url", url)
    assert res.exit_code == 2 and "at revision 0001" in res.stderr and "mixroute db upgrade" in res.stderr


def test_bad_url_is_one_line(tmp_path: Path):
    res = _run("export", str(tmp_path / "o.jsonl"), "--database-url", "notaurl")
    assert res.exit_code == 2 and "not a database URL" in res.stderr and "Traceback" not in res.output


@pytest.mark.parametrize("age", ["0d", "0s", "12h", "23h"])
def test_prune_under_a_day_needs_yes(filled: str, age: str):
    res = _run("prune", "--older-than", age, "--database-url", filled)
    assert res.exit_code == 2 and "--yes" in res.stderr
    assert rows(filled, "SELECT count(*) FROM decisions") == [(2,)]
    dry = _run("prune", "--older-than", age, "--dry-run", "--database-url", filled)
    assert dry.exit_code == 0 and "would delete" in dry.output
    res = _run("prune", "--older-than", age, "--yes", "--database-url", filled)
    assert res.exit_code == 0, res.output
    assert rows(filled, "SELECT request_id FROM decisions") == ([] if age.startswith("0") else [("r-now",)])


def test_prune_of_a_day_or_more_needs_no_confirmation(filled: str):
    res = _run("prune", "--older-than", "1d", "--database-url", filled)
    assert res.exit_code == 0 and "deleted 1 decision(s)" in res.output, res.output
    assert rows(filled, "SELECT request_id FROM decisions") == [("r-now",)]


@pytest.mark.parametrize("args, fragment", [
    (("--since", "1000000d"), "outside the dates this can handle"),
    (("--since", "99999999999d"), "longer than any date can go back"),
    (("--until", "9999-12-31T23:59:59-14:00"), "outside the dates this can handle"),
])
def test_times_beyond_the_calendar_are_one_line(filled: str, tmp_path: Path, args, fragment):
    res = _run("export", str(tmp_path / "o.jsonl"), *args, "--database-url", filled)
    assert res.exit_code == 2, res.output
    assert fragment in " ".join(res.output.split()).replace("│", "").replace("  ", " ") or fragment in " ".join(
        res.stderr.replace("│", " ").split()), res.output
    assert "Traceback" not in res.output


def test_export_refuses_folders_and_devices_and_reports_write_errors(filled: str, tmp_path: Path):
    res = _run("export", str(tmp_path), "--database-url", filled)
    assert res.exit_code == 2 and "is a folder" in res.stderr
    res = _run("export", "/dev/null", "--database-url", filled)  # replacing a device node with a file: no
    assert res.exit_code == 2 and "not a regular file" in res.stderr
    assert Path("/dev/null").is_char_device()
    blocker = tmp_path / "file"
    blocker.write_text("x")
    res = _run("export", str(blocker / "o.jsonl"), "--database-url", filled)  # a file where a folder should be
    assert res.exit_code == 2 and "Traceback" not in res.output


def test_keys_and_tenants_with_a_bad_store_url_are_one_line(tmp_path: Path):
    runner = CliRunner()
    for args in (["keys", "list", "--database-url", "bogus://x"],
                 ["tenants", "list", "--database-url", f"sqlite:///{tmp_path}/missing/dir/x.db"]):
        res = runner.invoke(app, args)
        assert res.exit_code in (1, 2), res.output
        assert res.stderr.startswith("error: ") and "Traceback" not in res.output, res.output
    res = runner.invoke(app, ["tenants", "set", "", "--budget-usd", "5", "--database-url", f"sqlite:///{tmp_path}/t.db"])
    assert res.exit_code == 2 and "must not be empty" in res.stderr


def test_prune_older_than_any_date_is_one_line(tmp_path: Path):
    res = _run("prune", "--older-than", "999999d", "--database-url", f"sqlite:///{tmp_path / 'x.db'}")
    assert res.exit_code == 2 and "outside the dates" in res.stderr and "--older-than" in res.stderr
    assert res.exception is None or isinstance(res.exception, SystemExit)
