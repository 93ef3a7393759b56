"""``mixroute replay`` from a fresh-user pass: options out of range, an empty ``--data`` and
``--json`` with ``--write-policy`` are refused with one line (exit 2) before anything runs,
and a run shows its progress on standard error."""

from __future__ import annotations

import httpx
import pytest
from typer.testing import CliRunner

from gateway.cli import app
from gateway.commands.replay import prepare, send_all
from gateway.commands.replay_report import Progress
from tests.replay.tiny import write_bench

runner = CliRunner()
INT64 = 2**63 - 1


@pytest.mark.parametrize(("option", "value", "allowed"), [
    ("--n", "0", f"from 1 to {INT64}"),
    ("--n", "-5", f"from 1 to {INT64}"),
    ("--concurrency", "0", "from 1 to 64"),
    ("--concurrency", "65", "from 1 to 64"),
    ("--seed", str(2**63), f"from -{INT64} to {INT64}"),
])
def test_an_option_out_of_range_is_one_line_naming_the_option_and_its_range(tmp_path, option, value, allowed):
    """It was typer's multi-line boxed "Invalid value" error."""
    res = runner.invoke(app, ["replay", "--data", str(write_bench(tmp_path)), "--json", str(tmp_path / "o.json"),
                              option, value])
    assert res.exit_code == 2
    assert res.stderr == f"mixroute replay: {option} must be {allowed}, got {value}\n"
    assert res.stdout == "" and not (tmp_path / "o.json").exists()


def test_the_help_still_states_the_ranges():
    import typer

    helps = {p.name: p.help for p in typer.main.get_command(app).commands["replay"].params}
    assert helps["concurrency"].startswith("Requests in flight, 1 to 64.")
    assert helps["n"] == f"Send only the first N prompts (1 to {INT64})."
    assert f"-{INT64} to {INT64}" in helps["seed"]


@pytest.mark.parametrize("data", [[""], ["bench.csv", ""]])
def test_an_empty_data_path_is_refused_not_read_as_the_current_folder(tmp_path, monkeypatch, data):
    """``--data ''`` read the current folder (``Path("")`` is ``.``): here it wrote a policy for
    the bench.csv found there."""
    write_bench(tmp_path)
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(app, ["replay", *(a for d in data for a in ("--data", d)), "--write-policy", "-"])
    assert res.exit_code == 2, res.output
    assert res.stderr == ("mixroute replay: --data '': an empty path; give an outcome data file or folder "
                          "(. for the current folder)\n")
    assert res.stdout == ""
    assert runner.invoke(app, ["replay", "--data", ".", "--write-policy", "-"]).exit_code == 0  # "." still reads it


@pytest.mark.parametrize("json_out", ["o.json", "-"])
def test_json_with_write_policy_is_refused(tmp_path, json_out):
    """``--write-policy`` writes the policy and exits; the ``--json`` given with it was silently ignored."""
    policy = tmp_path / "p.yaml"
    res = runner.invoke(app, ["replay", "--data", str(write_bench(tmp_path)), "--write-policy", str(policy),
                              "--json", str(tmp_path / json_out) if json_out != "-" else "-"])
    assert res.exit_code == 2, res.output
    assert res.stderr == ("mixroute replay: --write-policy writes the policy and exits without replaying, so "
                          "--json has nothing to write; give one of them\n")
    assert not policy.exists() and not (tmp_path / "o.json").exists() and res.stdout == ""


class _Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_progress_prints_a_line_per_tenth_at_most_ten():
    clock, lines = _Clock(), []
    progress = Progress(2205, echo=lines.append, clock=clock)
    for done in range(1, 2206):
        clock.now = 100.0 + done * 0.05  # 20 prompts a second
        progress(done)
    assert len(lines) == 10
    assert lines[0] == "replay: 221/2205 prompts (10%), 0:11 elapsed, ~1:39 left"
    assert lines[1] == "replay: 441/2205 prompts (20%), 0:22 elapsed, ~1:28 left"
    assert lines[-1] == "replay: 2205/2205 prompts (100%), 1:50 elapsed"
    assert [int(line.split("(")[1].split("%")[0]) for line in lines] == list(range(10, 101, 10))


def test_progress_of_a_short_or_long_run():
    lines = []
    progress = Progress(3, echo=lines.append, clock=_Clock())
    for done in (1, 2, 2, 3):  # a count repeated prints once
        progress(done)
    assert lines == ["replay: 1/3 prompts (33%), 0:00 elapsed, ~0:00 left",
                     "replay: 2/3 prompts (67%), 0:00 elapsed, ~0:00 left", "replay: 3/3 prompts (100%), 0:00 elapsed"]
    clock, lines = _Clock(), []
    progress = Progress(10, echo=lines.append, clock=clock)
    clock.now += 3 * 3600 + 62
    progress(10)
    assert lines == ["replay: 10/10 prompts (100%), 3:01:02 elapsed"]
    Progress(0, echo=lines.append)(0)  # nothing to send: no line, no division by zero
    assert len(lines) == 1


@pytest.mark.parametrize("concurrency", [1, 3])
async def test_send_all_reports_each_answer_to_progress(tmp_path, concurrency):
    plan, rows = prepare([write_bench(tmp_path)])

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, json={"error": {"message": "busy"}})  # failed requests count too

    seen = []
    answered = await send_all("http://gw", plan, rows, concurrency=concurrency,
                              transport=httpx.MockTransport(handler), progress=seen.append)
    assert seen == [1, 2, 3] and len(answered) == len(rows) == 3
