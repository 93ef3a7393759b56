"""``mixroute keys``: whole ids in every output form, ``--json``, tenant checks, ``--routes``
against ``--policy``, and USD budgets in fixed notation (CLI and the 429 over HTTP)."""

from __future__ import annotations

import json

import httpx
import pytest
from typer.testing import CliRunner

from gateway.cli import app
from gateway.commands import keys as keys_cmd
from tests.gateway.conftest import start_gateway

POLICY = """version: 1
backends:
  - {name: priced, kind: fake, model: priced-model, quality: 0.9, pricing: {input_per_1m: 10, output_per_1m: 10}}
routes:
  - {name: auto, backends: [priced]}
"""


def _run(*args: str):
    return CliRunner().invoke(app, ["keys", *args])


def _create(db: str, *args: str, tenant: str = "acme"):
    res = _run("create", "--tenant", tenant, *args, "--database-url", db)
    assert res.exit_code == 0, res.output
    key_id = res.stdout.split()[2]
    return res, key_id


def _no_keys(db: str) -> None:
    """No key was created: the store holds none, or was not even created."""
    res = _run("list", "--json", "--database-url", db)
    if res.exit_code == 1:
        assert "no database at" in res.stderr, res.output
    else:
        assert res.exit_code == 0 and json.loads(res.stdout) == [], res.output


@pytest.fixture
def db(tmp_path) -> str:
    return f"sqlite:///{tmp_path}/keys.db"


def test_list_piped_prints_whole_ids_as_rows(db):
    _, key_id = _create(db)
    res = _run("list", "--database-url", db)
    assert res.exit_code == 0
    header, row = res.stdout.splitlines()
    assert header.split("\t")[:3] == ["key id", "prefix", "tenant"]
    assert row.split("\t")[0] == key_id and row.split("\t")[2] == "acme"


def test_list_on_a_narrow_terminal_keeps_ids_whole(db, monkeypatch):
    _, key_id = _create(db, "--routes", "auto", tenant="a-tenant-with-a-rather-long-name")
    prefix = _run("list", "--json", "--database-url", db).stdout
    prefix = json.loads(prefix)[0]["prefix"]
    monkeypatch.setattr(keys_cmd, "_interactive", lambda: True, raising=False)
    for width in ("40", "80"):
        monkeypatch.setenv("COLUMNS", width)
        res = _run("list", "--database-url", db)
        assert res.exit_code == 0
        assert key_id in res.stdout and prefix in res.stdout, res.stdout


def test_list_json(db):
    _, key_id = _create(db, "--budget-usd", "0.00002", "--rpm", "5", "--routes", "auto")
    res = _run("list", "--json", "--all", "--database-url", db)
    assert res.exit_code == 0
    (got,) = json.loads(res.stdout)
    assert got["key_id"] == key_id and got["tenant"] == "acme" and got["budget_usd"] == pytest.approx(2e-5)
    assert got["rpm"] == 5 and got["routes"] == ["auto"] and got["revoked_at"] is None
    assert got["created_at"].startswith("20")


def test_budget_is_shown_in_fixed_notation(db):
    res, _ = _create(db, "--budget-usd", "0.00002")
    assert "budget 0.000020 USD per month" in res.stdout and "e-05" not in res.stdout
    res, _ = _create(db, "--budget-usd", "1", "--period", "total", "--rpm", "5")
    assert "[budget 1.000000 USD in total, 5 requests/min]" in res.stdout, res.stdout
    listed = _run("list", "--database-url", db).stdout
    assert "0.000020" in listed and "e-05" not in listed


@pytest.mark.parametrize(("tenant", "problem"), [
    ("t" * 129, "at most 128 characters, got 129"),
    ("acme\nevil", "control characters, found U+000A"),
    ("\x1b[31mred", "control characters, found U+001B"),
    ("tab\there", "U+0009"),
    ("admin", "'admin' is reserved: the admin key's requests are logged as tenant 'admin'"),
    ("-", "'-' is reserved"),
])
def test_create_rejects_bad_tenants(db, tenant, problem):
    res = _run("create", "--tenant", tenant, "--database-url", db)
    assert res.exit_code == 2 and problem in res.stderr
    _no_keys(db)


def test_create_accepts_a_128_character_unicode_tenant(db):
    _create(db, tenant="é" * 128)


def test_routes_checked_against_policy(db, tmp_path):
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    res = _run("create", "--tenant", "acme", "--routes", "auto", "--routes", "nope", "--policy", str(policy),
               "--database-url", db)
    assert res.exit_code == 2 and "error: --routes 'nope': not a route or backend" in res.stderr
    assert "known: auto, priced" in res.stderr and "'auto'" not in res.stderr
    _no_keys(db)  # a key that could never use the route it was made for is not created
    clean, _ = _create(db, "--routes", "auto", "--routes", "priced", "--policy", str(policy))
    assert "--routes" not in clean.stderr  # (the first key in a new store notes where it went)


def test_routes_without_policy_are_noted_as_unchecked(db):
    res, _ = _create(db, "--routes", "whatever")
    assert "not checked against a policy" in res.stderr
    quiet, _ = _create(db)
    assert quiet.stderr == ""


@pytest.mark.parametrize(("routes", "message"), [
    ("auto,best", "error: --routes 'auto,best' is not one route or backend name; repeat the option for each: "
                  "--routes auto --routes best"),
    ("auto, best", "--routes auto --routes best"),
    ("my route", "error: --routes 'my route' cannot be a route or backend name"),
])
def test_routes_no_policy_could_name_are_refused(db, routes, message):
    # '--routes auto,best' made a key allowed only the route 'auto,best', which no policy can
    # hold: it could use nothing ("This key may only use: auto,best" for model auto), and
    # `keys list` showed it as two routes.
    res = _run("create", "--tenant", "acme", "--routes", routes, "--database-url", db)
    assert res.exit_code == 2 and message in res.stderr, res.output
    _no_keys(db)


def test_bad_policy_file_exits_2_without_creating_a_key(db, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nroutes: [\n")
    res = _run("create", "--tenant", "acme", "--routes", "auto", "--policy", str(bad), "--database-url", db)
    assert res.exit_code == 2 and "bad.yaml" in res.stderr
    _no_keys(db)


def test_budget_429_over_http_uses_fixed_notation(tmp_path, db):
    res, _ = _create(db, "--budget-usd", "0.00002", "--routes", "auto")
    key = res.stdout.strip().splitlines()[-1]
    gw = start_gateway(tmp_path, POLICY, database_url=db)
    try:
        body = {"model": "auto", "messages": [{"role": "user", "content": "spend it all " * 20}]}
        headers = {"authorization": f"Bearer {key}"}
        statuses = []
        for _ in range(5):
            r = httpx.post(gw.v1 + "/chat/completions", json=body, headers=headers, timeout=30)
            statuses.append(r.status_code)
            if r.status_code == 429:
                break
        assert statuses[-1] == 429, statuses
        message = r.json()["error"]["message"]
        assert "Budget of 0.000020 USD per month is spent" in message and "e-05" not in message
    finally:
        gw.stop()


@pytest.mark.parametrize("args", [["--tpm", "99999999999999999999999"], ["--rpm", "3000000000"],
                                  ["--routes", ""], ["--rpm", "0"]])
def test_create_refuses_limits_the_store_cannot_hold_and_empty_routes(db, args):
    res = _run("create", "--tenant", "t1", *args, "--database-url", db)
    assert res.exit_code == 2 and "Traceback" not in res.output and res.stderr.startswith("error: "), res.output
    _no_keys(db)


def test_create_refuses_a_tenant_with_surrounding_spaces(db):
    res = _run("create", "--tenant", " spaced ", "--database-url", db)
    assert res.exit_code == 2 and "whitespace" in res.stderr


def test_create_refuses_an_invisible_tenant(db):
    res = _run("create", "--tenant", "\u200b", "--database-url", db)
    assert res.exit_code == 2 and "invisible" in res.stderr


@pytest.mark.parametrize("args", [("keys", "list"), ("keys", "revoke", "abc"), ("tenants", "list")])
def test_reading_commands_do_not_create_a_store_at_a_mistyped_path(tmp_path, args):
    """From a new-user pass: `keys list --database-url sqlite:///typo.db` created and migrated
    typo.db and printed an empty table (as if every key were gone), as `keys revoke` and
    `tenants list` did; `logs export` already refused a missing database."""
    typo = tmp_path / "typo.db"
    res = CliRunner().invoke(app, [*args, "--database-url", f"sqlite:///{typo}"])
    assert res.exit_code == 1, res.output
    assert "no database at" in res.output and str(typo) in res.output
    assert not typo.exists()


def test_creating_commands_still_create_the_store(tmp_path):
    db = tmp_path / "new.db"
    _create(f"sqlite:///{db}")
    assert db.exists()
    res = CliRunner().invoke(app, ["tenants", "set", "acme", "--budget-usd", "1",
                                   "--database-url", f"sqlite:///{tmp_path}/other.db"])
    assert res.exit_code == 0, res.output


def test_tenants_set_period_alone_is_refused_and_removal_removes_the_record(tmp_path):
    """From a fresh-user pass: `tenants set beta --period total` (meant: change the period)
    removed beta's budget, and `tenants set ghost` created a budget-less record that `tenants
    list` then showed."""
    url = f"sqlite:///{tmp_path}/t.db"

    def tenants(*args):
        return CliRunner().invoke(app, ["tenants", *args, "--database-url", url])

    assert tenants("set", "beta", "--budget-usd", "5", "--period", "day").exit_code == 0
    res = tenants("set", "beta", "--period", "total")
    assert res.exit_code == 2 and "--period needs --budget-usd" in res.stderr
    assert "beta" in tenants("list").stdout and "5.0" in tenants("list").stdout
    assert tenants("set", "ghost").exit_code == 0 and "ghost" not in tenants("list").stdout
    assert tenants("set", "beta").exit_code == 0 and "beta" not in tenants("list").stdout


def test_a_key_written_to_a_new_store_says_where(tmp_path):
    """From a fresh-user pass: `keys create` in a folder without a store created ./mixroute.db
    in silence; a key written where no gateway reads it never works."""
    url = f"sqlite:///{tmp_path}/new.db"
    first, _ = _create(url)
    assert f"note: created a new store at {tmp_path}/new.db" in first.stderr
    second, _ = _create(url)
    assert second.stderr == ""


def test_period_without_a_budget_and_budgets_below_a_millionth(db):
    """From a break-it pass: `keys create --period day` without a budget made a key (tenants
    set refused the same), and a budget of 1e-7 USD printed as 0.000000."""
    res = _run("create", "--tenant", "acme", "--period", "day", "--database-url", db)
    assert res.exit_code == 2 and "--period needs --budget-usd" in res.output
    _no_keys(db)
    res, _ = _create(db, "--budget-usd", "0.0000001", "--period", "day")
    assert "budget 1.00e-07 USD per day" in res.stdout
    assert "1.00e-07" in _run("list", "--database-url", db).stdout
    tenants = CliRunner().invoke(app, ["tenants", "set", "acme", "--budget-usd", "0.0000001", "--database-url", db])
    assert tenants.exit_code == 0 and "1.00e-07 USD per month" in tenants.stdout
    assert "1.00e-07" in CliRunner().invoke(app, ["tenants", "list", "--database-url", db]).stdout
    assert keys_cmd._usd(2.5) == "2.500000" and keys_cmd._usd(0) == "0.000000"


@pytest.mark.parametrize("args", [("tenants", "set", "x/y", "--budget-usd", "1"),
                                  ("keys", "create", "--tenant", "x/y")])
def test_a_tenant_name_with_a_slash_is_refused_in_one_line(tmp_path, args):
    """From a fresh-user pass: `tenants set x/y` succeeded, and the admin API could then not
    reach the tenant at /v1/admin/tenants/x%2Fy (404)."""
    url = f"sqlite:///{tmp_path}/t.db"
    res = CliRunner().invoke(app, [*args, "--database-url", url])
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "'/'" in lines[0], res.output
    listed = CliRunner().invoke(app, ["tenants", "list", "--json", "--database-url", url])
    assert "x/y" not in listed.output
