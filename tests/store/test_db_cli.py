"""``mixroute db``: a bad URL, a missing driver or an unknown revision is one line on
stderr and exit 1/2, never a traceback."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gateway.cli import app
from gateway.store import current


def _run(*args: str):
    return CliRunner().invoke(app, list(args))


def _one_clean_line(res) -> str:
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert "Traceback" not in res.output and res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    return lines[0]


@pytest.mark.parametrize("command", ["upgrade", "current"])
def test_unparsable_url_exits_2(command):
    res = _run("db", command, "--database-url", "notaurl")
    assert res.exit_code == 2
    line = _one_clean_line(res)
    assert "'notaurl' is not a database URL" in line and "sqlite:///" in line


def test_unknown_database_kind_exits_2():
    res = _run("db", "upgrade", "--database-url", "foo://u:secret@h/db")
    assert res.exit_code == 2
    line = _one_clean_line(res)
    assert "unknown database kind 'foo'" in line and "secret" not in line


@pytest.mark.parametrize("command", ["upgrade", "current"])
def test_mysql_without_driver_exits_1(command):
    if "MySQLdb" in sys.modules or _importable("MySQLdb"):
        pytest.skip("mysqlclient is installed here")
    res = _run("db", command, "--database-url", "mysql://u:hunter2@localhost/db")
    assert res.exit_code == 1
    line = _one_clean_line(res)
    assert "'MySQLdb' is not installed" in line and "hunter2" not in line


def test_postgres_without_psycopg_exits_1(monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg now raises ImportError
    res = _run("db", "upgrade", "--database-url", "postgresql://u:hunter2@127.0.0.1:1/db")
    assert res.exit_code == 1
    line = _one_clean_line(res)
    assert "'psycopg' is not installed" in line and "mixroute[postgres]" in line and "hunter2" not in line


@pytest.mark.parametrize("revision", ["nope", "base", "-1", "0005@head", ""])
def test_unknown_revision_exits_2_before_touching_the_database(tmp_path: Path, revision: str):
    """Alembic's other forms (base, relative, branch@) crashed the command with a traceback
    (break-it pass); only revision ids and head are taken."""
    url = f"sqlite:///{tmp_path / 'm.db'}"
    res = _run("db", "upgrade", "--database-url", url, "--revision", revision)
    assert res.exit_code == 2
    line = _one_clean_line(res)
    assert f"unknown revision {revision!r}" in line and "0001" in line and "head" in line
    assert not (tmp_path / "m.db").exists()


def test_revision_option_reaches_that_revision(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'm.db'}"
    res = _run("db", "upgrade", "--database-url", url, "--revision", "0001")
    assert res.exit_code == 0, res.output
    assert current(url) == "0001"
    res = _run("db", "upgrade", "--database-url", url, "--revision", "0001")
    assert res.exit_code == 0, res.output
    # A revision below the database's is not a silent no-op that reports the newer one.
    assert _run("db", "upgrade", "--database-url", url).exit_code == 0
    res = _run("db", "upgrade", "--database-url", url, "--revision", "0001")
    assert res.exit_code == 2 and "past 0001: `db upgrade` does not downgrade" in _one_clean_line(res)
    assert current(url) != "0001"


def test_help_names_the_revision_option():
    res = _run("db", "upgrade", "--help")
    assert res.exit_code == 0
    assert "to the --revision given" in " ".join(res.output.split())
    assert "to REVISION" not in res.output


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def test_current_does_not_create_a_missing_sqlite_file(tmp_path: Path):
    """`db current` on a mistyped path created an empty database file."""
    typo = tmp_path / "typo.db"
    res = _run("db", "current", "--database-url", f"sqlite:///{typo}")
    assert res.exit_code == 0, res.output
    assert res.output.startswith("none") and "no database at" in res.output
    assert not typo.exists()


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:"])
def test_an_in_memory_database_is_refused(url: str):
    """It printed "at revision None" with exit 0 (break-it pass): nothing is kept."""
    res = _run("db", "upgrade", "--database-url", url)
    assert res.exit_code == 2 and "in-memory SQLite database" in _one_clean_line(res)


def test_a_missing_folder_is_named_as_serve_names_it(tmp_path: Path):
    """From a fresh-user pass: it said "upgrade failed: OperationalError: unable to open
    database file" where `mixroute serve` names the missing folder."""
    url = f"sqlite:///{tmp_path}/newdir/sub/x.db"
    res = _run("db", "upgrade", "--database-url", url)
    line = _one_clean_line(res)
    assert res.exit_code == 2, res.output
    assert f"folder {tmp_path}/newdir/sub does not exist; create it first" in line, line
    assert not (tmp_path / "newdir").exists()
    folder = _run("db", "upgrade", "--database-url", f"sqlite:///{tmp_path}")
    assert folder.exit_code == 2 and "is a folder; name a database file in it" in _one_clean_line(folder)
