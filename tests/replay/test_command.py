"""``mixroute replay``: prompt selection, the HTTP driver against a stub ASGI gateway,
the gateway subprocess lifecycle, and the real command end to end."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from typer.testing import CliRunner

from backends.call import CallReport
from backends.config import BackendConfig
from backends.data import load
from backends.registry import build_backend
from backends.replay.plan import ReplayPlan
from gateway.cli import app as cli_app
from gateway.commands.replay import ReplayFailed, interleave, local_gateway, prepare, send_all
from gateway.commands.replay_report import build_report
from router.aggregate import DEFAULT_WINDOW
from router.policy.quality_bar import DEFAULT_ALLOCATION, DEFAULT_UNCERTAINTY_Z
from tests.replay.tiny import write_bench, write_routellm

ROOT = Path(__file__).resolve().parents[2]


def test_prepare_dedupes_shuffles_and_takes_n(tmp_path):
    path = write_bench(tmp_path)
    plan, rows = prepare([path])
    assert [r.prompt for r in rows] == ["What is 2+2?\nA) 3\nB) 4", "Capital of France?", "Hard one"]
    _, first2 = prepare([path], n=2)
    assert first2 == rows[:2]
    _, a = prepare([path], seed=1)
    _, b = prepare([path], seed=1)
    assert [r.prompt for r in a] == [r.prompt for r in b] and sorted(r.prompt for r in a) == sorted(r.prompt for r in rows)
    assert plan.dataset.strongest() == "big/model-1"  # 0.5 each over all 4 rows: first column wins


def _rows(source: str, n: int) -> list:
    from backends.data import OutcomeRow

    return [OutcomeRow(prompt=f"{source} {k}", scores={}, costs={}, source=source) for k in range(n)]


def test_interleave_spreads_each_file_evenly_and_keeps_its_order():
    rows = _rows("arc", 6) + _rows("mbpp", 2) + _rows("wino", 4)
    mixed = interleave(rows)
    assert sorted(r.prompt for r in mixed) == sorted(r.prompt for r in rows)
    for source in ("arc", "mbpp", "wino"):  # each file's own order kept
        assert [r.prompt for r in mixed if r.source == source] == [r.prompt for r in rows if r.source == source]
    # k-th of n at (k + 0.5) / n: arc 1/12, 3/12, 5/12..., mbpp 1/4, 3/4, wino 1/8, 3/8...; ties: first-seen file
    assert [r.prompt for r in mixed] == ["arc 0", "wino 0", "arc 1", "mbpp 0", "wino 1", "arc 2", "arc 3", "wino 2",
                                         "arc 4", "mbpp 1", "wino 3", "arc 5"]
    # any first stretch mixes the files in proportion (within one row of each)
    for n in range(1, len(rows) + 1):
        for source, total in (("arc", 6), ("mbpp", 2), ("wino", 4)):
            assert abs(sum(r.source == source for r in mixed[:n]) - n * total / len(rows)) <= 1
    one = _rows("arc", 3)
    assert interleave(one) == one


def test_prepare_orders_file_by_file_interleaved_or_shuffled(tmp_path):
    a = write_bench(tmp_path)
    b = tmp_path / "other.csv"  # the same rows under other prompts, from another file
    b.write_text(a.read_text(encoding="utf-8").replace("?", "? (again)").replace("Hard one", "Hard two"),
                 encoding="utf-8")
    _, by_file = prepare([a, b])
    _, mixed = prepare([a, b], order="interleaved")
    assert [r.source for r in by_file] == ["bench"] * 3 + ["other"] * 3
    assert [r.source for r in mixed] == ["bench", "other"] * 3
    assert sorted(r.prompt for r in mixed) == sorted(r.prompt for r in by_file)
    _, first = prepare([a, b], order="interleaved", n=2)  # --n takes the first of the mix
    assert [r.source for r in first] == ["bench", "other"]
    # From a break-it pass: two files of one name in different folders were one group.
    (tmp_path / "x").mkdir()
    same = tmp_path / "x" / "bench.csv"
    same.write_text(b.read_text(encoding="utf-8"), encoding="utf-8")
    _, mixed = prepare([a, same], order="interleaved")
    assert [r.prompt for r in mixed] == [r.prompt for pair in zip(by_file[:3], by_file[3:]) for r in pair]
    _, shuffled = prepare([a, b], seed=3, order="interleaved")  # a seed wins
    _, again = prepare([a, b], seed=3)
    assert shuffled == again


def test_replay_order_is_checked_before_the_run(tmp_path):
    data = write_bench(tmp_path)
    result = CliRunner().invoke(cli_app, ["replay", "--data", str(data), "--json", str(tmp_path / "o.json"),
                                          "--order", "random"])
    assert result.exit_code == 2 and "--order 'random': one of interleaved, data" in result.output
    result = CliRunner().invoke(cli_app, ["replay", "--data", str(data), "--json", str(tmp_path / "o.json"),
                                          "--order", "data", "--seed", "1"])
    assert result.exit_code == 2 and "give --order or --seed, not both" in result.output
    assert not (tmp_path / "o.json").exists()


def test_prepare_rejects_single_model_data(tmp_path):
    """From a fresh-user pass: a CSV of `prompt,foo` replayed as one model, "baseline (foo)"."""
    weird = tmp_path / "weird.csv"
    weird.write_text("prompt,foo\nhello,1\nworld,0\n")
    with pytest.raises(ReplayFailed, match="single-model data"):
        prepare([weird])


def test_prepare_rejects_mixed_model_sets(tmp_path):
    with pytest.raises(ReplayFailed, match="differ"):
        prepare([write_bench(tmp_path), write_routellm(tmp_path)])


def test_cli_bad_data_exits_2(tmp_path):
    result = CliRunner().invoke(cli_app, ["replay", "--data", str(tmp_path / "missing.csv"), "--json",
                                          str(tmp_path / "o.json")])
    assert result.exit_code == 2 and "no such file or folder" in result.output


@pytest.mark.parametrize("option", ["--n", "--seed"])
def test_an_n_or_seed_the_report_cannot_hold_is_refused_before_the_run(tmp_path, option):
    """From a fresh-user pass: a 23-digit --n or --seed ran every row, then lost the report
    to a traceback (orjson: "Integer exceeds 64-bit range")."""
    result = CliRunner().invoke(cli_app, ["replay", "--data", str(write_bench(tmp_path)), "--json",
                                          str(tmp_path / "o.json"), option, "99999999999999999999999"])
    assert result.exit_code == 2 and option in result.output and "Traceback" not in result.output
    assert not (tmp_path / "o.json").exists()


@pytest.mark.parametrize("timeout", ["0", "-1", "nan"])
def test_a_startup_timeout_that_cannot_be_waited_is_refused_before_the_gateway_starts(tmp_path, timeout):
    # It started the gateway, then failed with "not ready after nan s:" and an empty log tail.
    result = CliRunner().invoke(cli_app, ["replay", "--data", str(write_bench(tmp_path)), "--json",
                                          str(tmp_path / "o.json"), "--startup-timeout", timeout])
    assert result.exit_code == 2
    assert f"--startup-timeout must be a positive number of seconds, got {float(timeout)}" in result.output
    assert "not ready" not in result.output and not (tmp_path / "o.json").exists()


@pytest.mark.parametrize("url", ["notaurl", "ftp://127.0.0.1:1", "http://127.0.0.1:1"])
def test_an_unreachable_gateway_fails_before_sending_any_row(tmp_path, url):
    result = CliRunner().invoke(cli_app, ["replay", "--data", str(write_bench(tmp_path)), "--json",
                                          str(tmp_path / "o.json"), "--gateway", url])
    assert result.exit_code != 0 and "cannot reach the gateway" in result.output
    assert not (tmp_path / "o.json").exists()


def _stub_gateway(plan: ReplayPlan) -> FastAPI:
    """Routes "Hard one" to the small model, everything else to the big one; "Capital"
    prompts fail once with 503 to exercise error counting."""
    names = {model: name for name, model in plan.names.items()}
    backends = {m: build_backend(BackendConfig(name=names[m], kind="replay", model=m, data=plan.data))
                for m in plan.dataset.models}
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await request.json()
        prompt = body["messages"][-1]["content"]
        if prompt.startswith("Capital"):
            return JSONResponse({"error": {"message": "no candidate", "type": "invalid_request_error", "param": None,
                                           "code": "no_candidate"}}, status_code=422)
        model = "small model" if prompt == "Hard one" else "big/model-1"
        report = CallReport()
        out = await backends[model].send("chat", body, report=report)
        cost = report.cost_usd  # None: a prompt the backend's data does not hold
        return JSONResponse(out, headers={"x-mixroute-backend": names[model],
                                          **({"x-mixroute-cost-usd": f"{cost:.10f}"} if cost is not None else {})})

    return app


async def test_send_all_and_report_against_a_stub_gateway(tmp_path):
    plan, rows = prepare([write_bench(tmp_path)])
    transport = httpx.ASGITransport(app=_stub_gateway(plan))
    answered = await send_all("http://stub", plan, rows, concurrency=2, transport=transport)
    assert [(a.backend, a.model) for a in answered] == [("big/model-1", "big/model-1"), (None, None),
                                                        ("small-model", "small model")]
    assert answered[1].error == "HTTP 422: no candidate"
    report = build_report(plan, answered)
    assert report["n"] == 2 and report["errors"] == 1
    assert report["quality"] == 1.0 and report["cost_usd"] == pytest.approx(0.004 + 0.0003)
    assert report["baseline"] == {"model": "big/model-1", "quality": 0.5, "cost_usd": pytest.approx(0.004 + 0.005)}
    assert report["gateway_cost_usd"] == pytest.approx(report["cost_usd"])
    assert report["quality_ratio"] == pytest.approx(2.0) and report["cost_ratio"] == pytest.approx(0.0043 / 0.009)
    assert [r["row"] for r in report["requests"]] == [0, 1, 2]


def test_local_gateway_starts_and_stops(tmp_path, monkeypatch):
    monkeypatch.setenv("MIXROUTE_CLASSIFIER", "off")  # start fast: this test is about the process
    path = write_bench(tmp_path)
    plan = ReplayPlan.build(load(path), [path])
    with pytest.raises(RuntimeError, match="boom"):
        with local_gateway(plan, timeout_s=60) as url:
            assert httpx.get(f"{url}/readyz").status_code == 200
            raise RuntimeError("boom")
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/readyz", timeout=2)


def test_local_gateway_that_cannot_start_reports_its_log(tmp_path, monkeypatch):
    monkeypatch.setenv("MIXROUTE_CLASSIFIER", "off")
    path = write_bench(tmp_path)
    plan = ReplayPlan.build(load(path), [path])
    plan.data = [tmp_path / "gone.csv"]
    with pytest.raises(ReplayFailed, match=r"(?s)exited with status.*gone\.csv"):
        with local_gateway(plan, timeout_s=60):
            pass


def _mixroute() -> list[str]:
    exe = shutil.which("mixroute") or str(Path(sys.executable).parent / "mixroute")
    return [exe] if Path(exe).is_file() else [sys.executable, "-m", "gateway.cli"]


def test_mixroute_replay_end_to_end_recomputes_from_data(data_dir, tmp_path):
    """The acceptance command on 20 winogrande rows; every figure recomputed from the loader."""
    data = data_dir / "routerbench" / "winograde_train.csv"
    out = tmp_path / "out.json"
    proc = subprocess.run([*_mixroute(), "replay", "--data", str(data), "--n", "20", "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "baseline" in proc.stdout
    report = json.loads(out.read_text())
    ds = load(data)
    rows = ds.rows[:20]
    reqs = report["requests"]
    assert report["n"] == 20 and report["errors"] == 0 and [r["row"] for r in reqs] == list(range(20))
    assert {r["source"] for r in reqs} == {"winograde_train"}
    for r in reqs:
        row = ds.rows[r["row"]]
        assert r["score"] == row.scores[r["model"]] and r["cost_usd"] == row.costs[r["model"]]
    assert report["quality"] == pytest.approx(sum(ds.rows[r["row"]].scores[r["model"]] for r in reqs) / 20)
    assert report["cost_usd"] == pytest.approx(sum(ds.rows[r["row"]].costs[r["model"]] for r in reqs))
    assert report["gateway_cost_usd"] == pytest.approx(report["cost_usd"], rel=1e-6)
    best = max(ds.models, key=ds.mean_score)
    assert report["baseline"] == {"model": best, "quality": pytest.approx(sum(r.scores[best] for r in rows) / 20),
                                  "cost_usd": pytest.approx(sum(r.costs[best] for r in rows))}
    shares = {m: sum(r["model"] == m for r in reqs) / 20 for m in {r["model"] for r in reqs}}
    assert report["backend_share"] == pytest.approx(shares) and sum(shares.values()) == pytest.approx(1.0)
    assert report["run"] == {"policy": "generated", "quality_bar": {"route_target": 0.95, "window": DEFAULT_WINDOW,
                                                                    "uncertainty_z": DEFAULT_UNCERTAINTY_Z,
                                                                    "allocation": DEFAULT_ALLOCATION},
                             "split": None, "order": "interleaved", "seed": None, "n": 20, "concurrency": 1}
    if report["predictor"] == "ClassifierPredictor":  # which estimates decided (from the gateway's /readyz)
        from router.classify.memory import DEFAULT_K, DEFAULT_SMOOTHING

        memory = report["classifier"]["memory"]
        assert (memory["k"], memory["task_smoothing"], memory["exclude_exact"]) == (DEFAULT_K, DEFAULT_SMOOTHING, True)
    # The same command again gives the same report: rows one at a time, scan windows not timed
    # (8 in flight and a start-up-timed scan budget flipped a few near-tied choices per run).
    again = tmp_path / "again.json"
    proc = subprocess.run([*_mixroute(), "replay", "--data", str(data), "--n", "20", "--json", str(again)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and json.loads(again.read_text())["requests"] == reqs


async def test_send_all_presents_the_api_key(tmp_path):
    plan, rows = prepare([write_bench(tmp_path)], n=1)
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization"))
        return httpx.Response(401, json={"error": {"message": "bad key", "type": "authentication_error",
                                                   "param": None, "code": "invalid_api_key"}})

    answered = await send_all("http://gw", plan, rows, api_key="k-123", transport=httpx.MockTransport(handler))
    assert seen == ["Bearer k-123"] and answered[0].error == "HTTP 401: bad key"


async def test_a_gateway_whose_backends_are_not_the_datas_models_gets_one_request(tmp_path):
    """From a fresh-user pass: `replay --gateway` against the demo policy sent every prompt
    (billed on a real gateway) and every answer was unscorable."""
    plan, rows = prepare([write_bench(tmp_path)], n=3)
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(200, headers={"x-mixroute-backend": "gpt-4o-mini"},
                              json={"model": "gpt-4o-mini", "choices": [{"message": {"content": "x"}}]})

    with pytest.raises(ReplayFailed, match="answered by backend 'gpt-4o-mini', which is not a model of the data"):
        await send_all("http://gw", plan, rows, transport=httpx.MockTransport(handler))
    assert len(calls) == 1 and len(rows) == 3


def test_prepare_keeps_only_the_classifiers_split(data_dir):
    from router.classify.data import split_of

    path = data_dir / "routerbench" / "mbpp_train.csv"
    _, everything = prepare([path])
    _, held = prepare([path], split="test")
    assert 0 < len(held) < len(everything)
    assert all(split_of(r.prompt) == "test" for r in held)
    _, calib = prepare([path], split="calib")
    _, heldout = prepare([path], split="heldout")  # calib and test together, in the data's order
    assert sorted(r.prompt for r in heldout) == sorted(r.prompt for r in held + calib)
    assert [r.prompt for r in heldout] == [r.prompt for r in everything if split_of(r.prompt) != "train"]
    with pytest.raises(ReplayFailed, match="one of"):
        prepare([path], split="dev")


def test_write_policy_then_serve_it_by_path(tmp_path):
    from router.policy import load_policy

    path = write_bench(tmp_path)
    for bad in (tmp_path, path / "p.yaml"):  # a folder; a path under a file
        res = CliRunner().invoke(cli_app, ["replay", "--data", str(path), "--write-policy", str(bad)])
        assert res.exit_code == 2 and "--write-policy" in res.output and "Traceback" not in res.output
    out = tmp_path / "new" / "replay.yaml"  # missing folders are created
    res = CliRunner().invoke(cli_app, ["replay", "--data", str(path), "--write-policy", str(out)])
    assert res.exit_code == 0, res.output
    loaded = load_policy(out)
    assert loaded.policy.route("auto").quality_bar.route_target == 0.95
    res = CliRunner().invoke(cli_app, ["replay", "--data", str(path), "--json", str(tmp_path / "o.json"),
                                       "--policy", str(tmp_path / "nope.yaml")])
    assert res.exit_code == 2 and "no such file" in res.output
    res = CliRunner().invoke(cli_app, ["replay", "--data", str(path), "--json", str(tmp_path / "o.json"),
                                       "--policy", str(tmp_path / "new")])  # a folder that exists
    assert res.exit_code == 2 and "a folder, not a policy file" in res.output and "no such file" not in res.output


def test_an_unknown_route_is_named_before_any_request(tmp_path):
    path = write_bench(tmp_path)
    res = CliRunner().invoke(cli_app, ["replay", "--data", str(path), "--json", str(tmp_path / "o.json"),
                                       "--route", "nosuch", "--n", "3"])
    assert res.exit_code == 2 and "--route 'nosuch'" in res.output and "auto" in res.output, res.output
    assert not (tmp_path / "o.json").exists()


def test_json_dash_writes_the_report_to_standard_output(tmp_path):
    """From a fresh-user pass: ``--json -`` wrote a file named ``-`` (``logs export`` takes
    ``-`` as standard output). The report is stdout's only content; the tables go to stderr."""
    proc = subprocess.run([*_mixroute(), "replay", "--data", str(write_bench(tmp_path)), "--json", "-"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)  # the progress lines went to stderr too
    assert report["n"] == len(report["requests"]) > 0
    assert "backend share" in proc.stderr and "report: standard output" in proc.stderr
    assert not (tmp_path / "-").exists()
    sent = len(report["requests"])
    assert f"replay: {sent} prompts to send to a local gateway" in proc.stderr
    assert f"replay: {sent}/{sent} prompts (100%), 0:" in proc.stderr and "replay:" not in proc.stdout


def test_write_policy_dash_prints_the_policy(tmp_path):
    """From a break-it pass: ``--write-policy -`` wrote a file named ``-``."""
    from router.policy import parse_policy

    # From a break-it pass: --write-policy needed a --json it never wrote (now --json is refused with it).
    res = CliRunner().invoke(cli_app, ["replay", "--data", str(write_bench(tmp_path)), "--write-policy", "-"])
    assert res.exit_code == 0, res.output
    assert parse_policy(res.stdout).policy.route("auto").quality_bar.route_target == 0.95
    assert not (tmp_path / "-").exists()
    res = CliRunner().invoke(cli_app, ["replay", "--data", str(write_bench(tmp_path))])  # a replay does need it
    assert res.exit_code == 2 and "--json OUT is required" in res.output and "Traceback" not in res.output


async def test_an_answer_from_a_backend_without_the_prompt_is_an_error_not_a_score(tmp_path):
    """From a break-it pass: `--policy` whose replay backends read other data answered every
    prompt "[replay: prompt not in the recorded data ...]", and the report scored those
    answers from --data (errors 0, quality 1.0)."""
    plan, rows = prepare([write_bench(tmp_path)])
    other = tmp_path / "other"
    other.mkdir()
    other_plan, _ = prepare([write_bench(other)])
    other_plan.data = [other / "bench.csv"]
    (other / "bench.csv").write_text((other / "bench.csv").read_text().replace("Hard one", "Harder one"))
    transport = httpx.ASGITransport(app=_stub_gateway(other_plan))
    answered = await send_all("http://stub", plan, rows, concurrency=1, transport=transport)
    missing = [a for a in answered if a.error and "has no recorded answer for this prompt" in a.error]
    assert [a.row.prompt for a in missing] == ["Hard one"] and missing[0].model is None
    report = build_report(plan, answered)
    assert report["errors"] == 2 and report["n"] == 1  # "Capital..." failed too; only "What is 2+2?" is scored
    # When the very first prompt is one of them, nothing else is sent.
    with pytest.raises(ReplayFailed, match="whose replay data does not hold it; no other prompt was sent"):
        await send_all("http://stub", plan, rows[2:], concurrency=1, transport=transport)
