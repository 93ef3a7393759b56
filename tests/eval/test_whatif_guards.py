"""``mixroute policy what-if`` from a break-it pass: a --json that is one of its inputs,
passwords in messages, bad URLs, windows from separate clocks, a non-SQLite ``.db`` file,
impossible logged probabilities and time errors that did not name their option. Real
SQLite files and export files throughout."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gateway.cli import app
from gateway.store import upgrade
from router.eval.whatif import Logged
from tests.eval.test_whatif import _log, _policy

runner = CliRunner()


@pytest.fixture
def pol(tmp_path: Path) -> Path:
    path = tmp_path / "new.yaml"
    path.write_text(_policy(0.6))
    return path


@pytest.fixture
def export(tmp_path: Path) -> Path:
    path = tmp_path / "export.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _log(6)))
    return path


def _what_if(*args: str, env: dict | None = None):
    return runner.invoke(app, ["policy", "what-if", *args], env=env)


def _one_line_exit_2(res, *fragments: str) -> None:
    assert res.exit_code == 2, res.output
    assert res.output.count("\n") == 1 and "Traceback" not in res.output, res.output
    for fragment in fragments:
        assert fragment in res.output, res.output


# 1. --json that is one of the inputs


def test_json_over_the_export_file_or_the_new_policy_is_refused(pol: Path, export: Path, tmp_path: Path):
    before = (export.read_bytes(), pol.read_bytes())
    res = _what_if(str(pol), "--logs", str(export), "--json", str(export))
    _one_line_exit_2(res, f"--json {export}: is an input file of this command (--logs {export})")
    link = tmp_path / "link.yaml"
    os.link(pol, link)
    res = _what_if(str(pol), "--logs", str(export), "--json", str(link))
    _one_line_exit_2(res, f"--json {link}: is an input file of this command (NEW_POLICY {pol})")
    assert (export.read_bytes(), pol.read_bytes()) == before


@pytest.mark.parametrize("form", ["path", "url", "default store"])
def test_json_over_the_store_is_refused(pol: Path, tmp_path: Path, form: str):
    store = tmp_path / "s.db"
    upgrade(f"sqlite:///{store}")
    before = store.read_bytes()
    env = {"MIXROUTE_DATABASE_URL": f"sqlite:///{store}"} if form == "default store" else None
    logs = {"path": ["--logs", str(store)], "url": ["--logs", f"sqlite:///{store}"], "default store": []}[form]
    res = _what_if(str(pol), *logs, "--json", str(store), env=env)
    _one_line_exit_2(res, f"--json {store}: is an input file of this command")
    assert store.read_bytes() == before


# 3. and 4. URLs: password masked, bad port or query values in one line


def test_the_password_of_an_unreachable_store_is_masked(pol: Path):
    res = _what_if(str(pol), "--logs", "postgresql://u:hunter2@127.0.0.1:1/x?connect_timeout=2")
    assert res.exit_code == 2 and "cannot read the store" in res.output, res.output
    assert "hunter2" not in res.output and "u:***@127.0.0.1:1" in res.output


@pytest.mark.parametrize("url, reason", [("postgresql://u:hunter2@h:notaport/x", "the port is not a number"),
                                         ("sqlite:///{store}?timeout=abc", "could not convert string to float")])
def test_a_bad_url_is_one_line_without_the_password(pol: Path, tmp_path: Path, url: str, reason: str):
    store = tmp_path / "s.db"
    upgrade(f"sqlite:///{store}")
    res = _what_if(str(pol), "--logs", url.format(store=store))
    _one_line_exit_2(res, "bad URL: ", reason)
    assert "hunter2" not in res.output


# 5. One `now` for --since and --until, and export's default --since


@pytest.mark.parametrize("args", [("--since", "now", "--until", "now"), ("--since", "1d", "--until", "1d"),
                                  ("--since", "0d"), ("--until", "1970-01-01")])
def test_an_empty_window_is_refused_as_export_refuses_it(pol: Path, export: Path, args):
    res = _what_if(str(pol), "--logs", str(export), *args)
    _one_line_exit_2(res, "--until must be after --since")
    assert "logged request(s)" not in res.output


def test_a_window_with_time_in_it_still_reads_the_file(pol: Path, export: Path):
    res = _what_if(str(pol), "--logs", str(export), "--until", "1970-01-02", "--bootstrap", "0")
    assert res.exit_code == 0 and "0 logged request(s)" in res.output, res.output


# 6. A file named like SQLite that is not


@pytest.mark.parametrize("name", ["notsqlite.db", "x.sqlite", "x.SQLITE3"])
def test_a_file_named_like_sqlite_that_is_not_one_says_so(pol: Path, tmp_path: Path, name: str):
    bad = tmp_path / name
    bad.write_text("this is not a database\n")
    res = _what_if(str(pol), "--logs", str(bad))
    _one_line_exit_2(res, "is named like a SQLite database but is not one")
    assert "line 1" not in res.output and "Expecting value" not in res.output
    empty = tmp_path / "empty.db"  # an empty file is an empty database to SQLite: never migrated
    sqlite3.connect(empty).close()
    _one_line_exit_2(_what_if(str(pol), "--logs", str(empty)), "never migrated")


# 7. Impossible logged probabilities


@pytest.mark.parametrize("probability", [-0.5, 0, 1.5, "0.0"])
def test_a_probability_outside_0_1_is_refused_naming_the_request(pol: Path, tmp_path: Path, probability):
    rows = _log(4, probability=0.5)
    rows[2]["probability"] = probability
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = _what_if(str(pol), "--logs", str(path))
    _one_line_exit_2(res, "request r2: column 'probability' must be in (0, 1]", repr(probability))
    with pytest.raises(ValueError, match=r"request r2: column 'probability' must be in \(0, 1\]"):
        Logged.from_row(rows[2])


def test_an_empty_probability_still_means_a_deterministic_choice():
    row = _log(1)[0]
    for empty in (None, ""):
        assert Logged.from_row({**row, "probability": empty}).probability == 1.0
    assert Logged.from_row({**row, "probability": 1}).probability == 1.0


# 8. Time errors name their option


@pytest.mark.parametrize("option", ["--since", "--until"])
def test_a_bad_time_names_its_option(pol: Path, export: Path, option: str):
    res = _what_if(str(pol), "--logs", str(export), option, "garbage")
    assert res.exit_code == 2 and f"Invalid value for '{option}'" in res.output, res.output
