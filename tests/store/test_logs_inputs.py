"""``mixroute logs`` and ``mixroute db current`` from a break-it pass: an OUT that is the
store's own file, an Alembic database that is not mixroute's, port and query values a
driver cannot take, windows from separate clocks, and time errors that did not name their
option. Real SQLite files throughout."""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gateway.cli import app
from gateway.store import upgrade


def _run(*args: str):
    return CliRunner().invoke(app, list(args))


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """An empty store migrated to head, in a folder of its own."""
    folder = tmp_path / "store"
    folder.mkdir()
    path = folder / "s.db"
    upgrade(f"sqlite:///{path}")
    return path


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


def _one_line_exit_2(res, *fragments: str) -> None:
    assert res.exit_code == 2, res.output
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.output, res.output
    for fragment in fragments:
        assert fragment in res.stderr, res.stderr


# 1. OUT that is one of the command's input files


def test_export_to_the_default_store_file_is_refused(store: Path, tmp_path: Path, monkeypatch):
    """`mixroute logs export mixroute.db` overwrote the default store with JSON lines, exit 0."""
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(store, work / "mixroute.db")
    monkeypatch.chdir(work)
    monkeypatch.delenv("MIXROUTE_DATABASE_URL", raising=False)
    before = _files(work)
    res = _run("logs", "export", "mixroute.db")
    _one_line_exit_2(res, "OUT mixroute.db: is an input file of this command (the store mixroute.db)")
    assert _files(work) == before


@pytest.mark.parametrize("form", ["same", "spelled", "hard link", "symlink", "wal", "file uri"])
def test_export_over_the_store_in_any_spelling_is_refused(store: Path, form: str):
    folder = store.parent
    url, out = f"sqlite:///{store}", store
    if form == "spelled":
        out = folder / ".." / folder.name / store.name
    elif form == "hard link":
        out = folder / "hard.db"
        os.link(store, out)
    elif form == "symlink":
        out = folder / "sym.db"
        out.symlink_to(store)
    elif form == "wal":  # not there until SQLite opens the store: refused by its resolved path
        out = folder / "s.db-wal"
    elif form == "file uri":
        url = f"sqlite:///file:{store}?uri=true"
    before = _files(folder)
    res = _run("logs", "export", str(out), "--database-url", url)
    _one_line_exit_2(res, f"OUT {out}: is an input file of this command")
    assert _files(folder) == before and not (folder / "s.db-wal").exists()


def test_export_next_to_the_store_still_works(store: Path):
    out = store.parent / "export.jsonl"
    res = _run("logs", "export", str(out), "--database-url", f"sqlite:///{store}")
    assert res.exit_code == 0 and "0 request(s)" in res.output, res.output
    assert out.exists()


# 2. An Alembic revision that is not one of mixroute's


def _execute(db: Path, statement: str) -> None:
    """Run one SQL statement on the SQLite file ``db`` and commit it."""
    conn = sqlite3.connect(db)
    conn.execute(statement)
    conn.commit()
    conn.close()


def _alembic_db(path: Path, revisions: list[str], tables: bool = True) -> Path:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
    if tables:
        conn.execute("CREATE TABLE things (x)")
    conn.executemany("INSERT INTO alembic_version VALUES (?)", [(r,) for r in revisions])
    conn.commit()
    conn.close()
    return path


@pytest.mark.parametrize("command", ["prune", "export"])
def test_another_programs_alembic_database_is_refused_as_it_was(tmp_path: Path, command: str):
    """Prune switched such a file to WAL and failed on `no such table: decisions` (exit 1)."""
    folder = tmp_path / "other"
    folder.mkdir()
    db = _alembic_db(folder / "other.db", ["abcdef123456"])
    before = _files(folder)
    args = ["--dry-run"] if command == "prune" else [str(tmp_path / "o.jsonl")]
    res = _run("logs", command, *args, "--database-url", f"sqlite:///{db}")
    _one_line_exit_2(res, "not a mixroute store (its alembic revision 'abcdef123456' is not one of mixroute's",
                     "newer mixroute")
    assert "no such table" not in res.output
    assert _files(folder) == before  # no -wal/-shm, journal mode as it was
    assert sqlite3.connect(db).execute("PRAGMA journal_mode").fetchone() == ("delete",)


def test_a_store_of_a_newer_mixroute_is_refused(store: Path):
    _execute(store, "UPDATE alembic_version SET version_num = '0099'")
    for args in (["prune", "--dry-run"], ["export", str(store.parent / "o.jsonl")]):
        res = _run("logs", *args, "--database-url", f"sqlite:///{store}")
        _one_line_exit_2(res, "its alembic revision '0099' is not one of mixroute's")
    assert not (store.parent / "o.jsonl").exists()


def test_two_revisions_in_alembic_version_are_one_line(store: Path):
    """Alembic's "more than one head present" was a traceback."""
    _execute(store, "INSERT INTO alembic_version VALUES ('0005')")
    res = _run("logs", "prune", "--dry-run", "--database-url", f"sqlite:///{store}")
    _one_line_exit_2(res, "not a mixroute store", "holds 2 revisions")


def test_an_empty_alembic_version_table_is_worded_without_contradiction(store: Path, tmp_path: Path):
    _execute(store, "DELETE FROM alembic_version")
    res = _run("logs", "prune", "--dry-run", "--database-url", f"sqlite:///{store}")
    _one_line_exit_2(res, "not a mixroute store", "its migration record (alembic_version) is empty")
    assert "no migration record" not in res.stderr and "tables (alembic_version" not in res.stderr
    only = _alembic_db(tmp_path / "only.db", [], tables=False)  # what `db upgrade` migrates from the start
    res = _run("logs", "prune", "--dry-run", "--database-url", f"sqlite:///{only}")
    _one_line_exit_2(res, "never migrated", "run `mixroute db upgrade` first")
    assert _run("db", "upgrade", "--database-url", f"sqlite:///{only}").exit_code == 0
    assert _run("logs", "prune", "--dry-run", "--database-url", f"sqlite:///{only}").exit_code == 0


# 4. Port and query values a driver cannot take


@pytest.mark.parametrize("query, reason", [
    ("?timeout=abc", "could not convert string to float: 'abc'"),
    ("?check_same_thread=maybe", "'maybe'"),
    ("?timeout=1&timeout=2", "tuple"),
])
@pytest.mark.parametrize("command", [("logs", "export", "-"), ("logs", "prune", "--dry-run"), ("db", "current")])
def test_a_bad_query_value_is_one_line(store: Path, query: str, reason: str, command):
    url = f"sqlite:///{store}{query}"
    res = _run(*command, "--database-url", url)
    _one_line_exit_2(res, f"--database-url: bad URL '{url}': ", reason)


@pytest.mark.parametrize("command", [("logs", "export", "-"), ("logs", "prune", "--dry-run"), ("db", "current")])
def test_a_port_that_is_not_a_number_is_one_line_without_the_password(command):
    res = _run(*command, "--database-url", "postgresql://u:hunter2@h:notaport/x")
    _one_line_exit_2(res, "--database-url: bad URL 'postgresql://u:***@h:notaport/x': the port is not a number")
    assert "hunter2" not in res.output


# 5. Windows read against one `now`


@pytest.mark.parametrize("args", [("--since", "now", "--until", "now"), ("--since", "1d", "--until", "1d"),
                                  ("--since", "0d"), ("--until", "1970-01-01")])
def test_an_empty_window_from_equal_expressions_is_refused(store: Path, args):
    res = _run("logs", "export", "-", *args, "--database-url", f"sqlite:///{store}")
    _one_line_exit_2(res, "--until must be after --since")
    assert "request(s)" not in res.output


# 8. Time and age errors name their option


@pytest.mark.parametrize("args, option", [(("export", "-", "--since", "garbage"), "'--since'"),
                                          (("export", "-", "--until", "garbage"), "'--until'"),
                                          (("prune", "--older-than", "garbage"), "'--older-than'")])
def test_a_bad_time_or_age_names_its_option(store: Path, args, option: str):
    res = _run("logs", *args, "--database-url", f"sqlite:///{store}")
    assert res.exit_code == 2 and f"Invalid value for {option}" in res.output, res.output
