"""``mixroute replay``: ``--write-policy`` or ``--json`` that is one of the input files
(a ``--data`` file, the ``--policy``) is refused before anything is written or served."""

from __future__ import annotations

from typer.testing import CliRunner

from gateway.cli import app
from tests.replay.tiny import write_bench

runner = CliRunner()


def test_write_policy_over_the_data_is_refused(tmp_path):
    data = write_bench(tmp_path)
    before = data.read_bytes()
    res = runner.invoke(app, ["replay", "--data", str(data), "--write-policy", str(data)])
    assert res.exit_code == 2, res.output
    assert f"--write-policy {data}: is an input file of this command (--data {data})" in res.output
    assert data.read_bytes() == before
    res = runner.invoke(app, ["replay", "--data", str(tmp_path), "--write-policy", str(data)])  # inside a folder
    assert res.exit_code == 2 and "is an input file" in res.output and data.read_bytes() == before


def test_json_over_the_served_policy_is_refused(tmp_path):
    data = write_bench(tmp_path)
    policy = tmp_path / "p.yaml"
    assert runner.invoke(app, ["replay", "--data", str(data), "--write-policy", str(policy)]).exit_code == 0
    before = policy.read_bytes()
    res = runner.invoke(app, ["replay", "--data", str(data), "--policy", str(policy), "--json", str(policy)])
    assert res.exit_code == 2 and f"(--policy {policy})" in res.output, res.output
    assert policy.read_bytes() == before
