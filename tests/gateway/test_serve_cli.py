"""``mixroute serve`` refuses bad settings with one clear line, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def _serve(*args, **env):
    return subprocess.run([sys.executable, "-m", "gateway.cli", "serve", *args], capture_output=True, text=True,
                          timeout=60, env={**os.environ, **env})


def test_bad_env_setting():
    res = _serve(MIXROUTE_MAX_BODY_BYTES="abc")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "MIXROUTE_MAX_BODY_BYTES" in res.stderr


def test_port_out_of_range():
    res = _serve("--port", "99999")
    assert res.returncode == 2 and "MIXROUTE_PORT (or --port)" in res.stderr and "Traceback" not in res.stderr


def test_bad_policy_file(tmp_path):
    bad = tmp_path / "p.yaml"
    bad.write_text("version: 1\nbackends: []\nroutes: []\n")
    res = _serve("--policy", str(bad))
    assert res.returncode == 1 and f"{bad}:2 backends" in res.stderr and "Traceback" not in res.stderr


def test_replay_data_without_the_backends_model_is_one_line(tmp_path):
    """Data the format sniff accepts but the replay backend cannot use (its model is not in
    it) used to fail in the server's lifespan with a DataFormatError traceback."""
    (tmp_path / "d.csv").write_text('prompt,other-model\n"hi",True\n')
    policy = tmp_path / "p.yaml"
    policy.write_text("version: 1\nbackends:\n  - {name: rp, kind: replay, model: big-model, data: [d.csv]}\n"
                      "routes:\n  - {name: auto, backends: [rp]}\n")
    res = _serve("--policy", str(policy), "--database-url", f"sqlite:///{tmp_path}/s.db")
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines()[-1] == (f"{policy}:3 backends[0].model: model 'big-model' is not in the "
                                                   "backend's data (models: other-model)")


def test_version_prints_the_installed_version():
    from importlib.metadata import version

    out = subprocess.run([sys.executable, "-m", "gateway.cli", "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == f"mixroute {version('mixroute')}"


def test_bad_event_loop_setting():
    res = _serve(MIXROUTE_EVENT_LOOP="trio")
    assert res.returncode == 2 and "MIXROUTE_EVENT_LOOP" in res.stderr and "Traceback" not in res.stderr


def test_event_loop_setting_reaches_the_server(monkeypatch, tmp_path, free_port):
    """``MIXROUTE_EVENT_LOOP`` picks uvicorn's loop (uvloop by default, asyncio on request)."""
    import uvicorn

    from gateway import serve

    seen = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: seen.update(kw))
    monkeypatch.setenv("MIXROUTE_ADMIN_KEY", "sk-test")
    for value, expected in ((None, "auto"), ("asyncio", "asyncio")):
        if value:
            monkeypatch.setenv("MIXROUTE_EVENT_LOOP", value)
        serve.run(policy=None, host=None, port=free_port, database_url=f"sqlite:///{tmp_path}/x.db")
        assert seen["loop"] == expected


def test_int8_maps_with_a_bfloat16_encoder_are_refused_at_start():
    """int8/onednn maps need a float32 encoder: the pair is a settings error, not a silent
    fallback to the quality priors (which would turn every signal rule off)."""
    res = _serve(MIXROUTE_CLASSIFIER_DTYPE="bfloat16", MIXROUTE_CLASSIFIER_LINEAR="int8")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "MIXROUTE_CLASSIFIER_LINEAR" in res.stderr and "bfloat16" in res.stderr


def test_classifier_on_that_cannot_load_is_one_line(tmp_path):
    """MIXROUTE_CLASSIFIER=on without the classifier's libraries: one line, exit 2 (was a
    traceback from the server's lifespan and exit 3)."""
    (tmp_path / "tokenizers.py").write_text("raise ImportError('blocked for this test', name='tokenizers')\n")
    res = _serve("--port", "18779", MIXROUTE_CLASSIFIER="on", MIXROUTE_ADMIN_KEY="sk-test",
                 PYTHONPATH=f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert "MIXROUTE_CLASSIFIER=on but the classifier cannot load: tokenizers not installed" in res.stderr


def test_unusable_database_url_is_one_line():
    for url, words in (("bogus://x", "unknown database kind 'bogus'"), ("not a url", "is not a database URL")):
        res = _serve("--port", "18999", "--database-url", url)
        assert res.returncode == 2 and words in res.stderr and "Traceback" not in res.stderr, res.stderr


def test_bad_redis_url_is_an_invalid_setting():
    res = _serve("--port", "18999", MIXROUTE_REDIS_URL="bogus")
    assert res.returncode == 2 and "invalid setting MIXROUTE_REDIS_URL" in res.stderr
    assert "redis://" in res.stderr and "Traceback" not in res.stderr


def test_redis_url_without_the_redis_extra_is_one_line(tmp_path):
    """From a fresh-user pass: MIXROUTE_REDIS_URL without `.[redis]` installed was a
    ModuleNotFoundError traceback from the app's start-up (exit 3)."""
    (tmp_path / "sitecustomize.py").write_text(
        "import importlib.util as u\n_f = u.find_spec\n"
        "u.find_spec = lambda name, *a: None if name == 'redis' else _f(name, *a)\n")
    res = _serve("--port", "18999", MIXROUTE_REDIS_URL="redis://127.0.0.1:6379/0",
                 PYTHONPATH=f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert "invalid setting MIXROUTE_REDIS_URL" in res.stderr and "pip install 'mixroute[redis]'" in res.stderr


def test_a_sqlite_file_in_a_missing_folder_is_refused(tmp_path):
    """From a fresh-user pass: a typo in the folder of a SQLite URL created that folder (via
    the spill journal) and a new, empty store there."""
    missing = tmp_path / "no" / "such"
    res = _serve("--port", "18999", "--database-url", f"sqlite:///{missing}/x.db")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert f"folder {missing} does not exist" in res.stderr
    assert not (tmp_path / "no").exists()


def test_in_memory_sqlite_and_impossible_ports_are_refused():
    for url, words in (("sqlite://", "in-memory SQLite"), ("sqlite:///", "in-memory SQLite"),
                       ("postgresql+psycopg://postgres@127.0.0.1:99999/test", "port 99999")):
        res = _serve("--port", "18999", "--database-url", url)
        assert res.returncode == 2 and words in res.stderr and "Traceback" not in res.stderr, (url, res.stderr)


def test_a_sqlite_path_that_is_a_folder_or_another_file_is_refused(tmp_path):
    # A folder was served 'ready' and journaled every row forever; a file of something else
    # failed start-up with a DatabaseError traceback and exit 3.
    (tmp_path / "notes.txt").write_text("prompt,gpt-4\nhi,1\n")
    for path, words in ((tmp_path, f"{tmp_path} is a folder; name a database file in it"),
                        (tmp_path / "notes.txt", f"{tmp_path / 'notes.txt'} is not a SQLite database")):
        res = _serve("--port", "18999", "--database-url", f"sqlite:///{path}")
        assert res.returncode == 2 and "MIXROUTE_DATABASE_URL" in res.stderr and words in res.stderr, res.stderr
        assert "Traceback" not in res.stderr
    assert (tmp_path / "notes.txt").read_text() == "prompt,gpt-4\nhi,1\n"


def test_journal_path_that_cannot_be_written_is_refused_and_a_folder_is_left_alone(tmp_path):
    folder = tmp_path / "sub"
    folder.mkdir()
    (folder / "important.txt").write_text("keep")
    afile = tmp_path / "afile"
    afile.write_text("")
    db = f"sqlite:///{tmp_path / 'd.db'}"
    for journal, words in ((folder, "is a directory"), (afile / "j.jsonl", "is not a directory")):
        res = _serve("--port", "18999", "--database-url", db, MIXROUTE_STORE_JOURNAL_PATH=str(journal))
        assert res.returncode == 2 and "MIXROUTE_STORE_JOURNAL_PATH" in res.stderr and words in res.stderr, res.stderr
        assert "Traceback" not in res.stderr
    assert (folder / "important.txt").read_text() == "keep" and not (tmp_path / "sub.replaying").exists()


def test_bad_rank_space_setting_is_refused():
    res = _serve("--port", "18999", MIXROUTE_CLASSIFIER_RANK_SPACE="maybe")
    assert res.returncode == 2 and "MIXROUTE_CLASSIFIER_RANK_SPACE" in res.stderr and "Traceback" not in res.stderr


def test_a_database_whose_folder_cannot_take_files_is_refused():
    # /proc passes os.access for root but takes no new file: neither the SQLite file nor its
    # journal could be written, so every decision would be lost.
    res = _serve("--port", "18999", "--database-url", "sqlite:////proc/mixroute-test.db")
    assert res.returncode == 2 and "/proc is not writable" in res.stderr and "Traceback" not in res.stderr
    assert "MIXROUTE_DATABASE_URL" in res.stderr  # the path came from the database URL, not the journal setting


def test_log_level_is_checked_and_any_case_is_fine():
    res = _serve("--port", "18999", MIXROUTE_LOG_LEVEL="loud")
    assert res.returncode == 2 and "MIXROUTE_LOG_LEVEL" in res.stderr and "Traceback" not in res.stderr
    from gateway.settings import Settings

    assert Settings(log_level="WARNING").log_level == "warning"


def test_arguments_that_are_not_utf8_are_refused_once_for_every_command():
    for args in (["keys", "create", "--tenant", "\udcff\udcfe"], ["tenants", "set", "\udcff", "--budget-usd", "1"],
                 ["keys", "revoke", "\udcff"]):
        res = subprocess.run([sys.executable, "-m", "gateway.cli", *args], capture_output=True, timeout=60,
                             env={**os.environ})
        err = res.stderr.decode("utf-8", "replace")
        assert res.returncode == 2 and "not valid UTF-8" in err and "Traceback" not in err, (args, err)


def test_offline_outputs_under_a_folder_that_takes_no_files_are_refused_before_the_work():
    import pytest
    import typer

    from gateway.commands.output import check_output

    with pytest.raises(typer.Exit) as info:
        check_output(Path("/proc/mixroute-eval.json"), "--json")  # root passes os.access here
    assert info.value.exit_code == 2


def test_the_start_banner_never_shows_the_database_password(tmp_path, free_port):
    import time

    url = os.environ.get("MIXROUTE_TEST_DATABASE_URL")
    if not url or "@" not in url:
        import pytest

        pytest.skip("needs MIXROUTE_TEST_DATABASE_URL (PostgreSQL) to start a gateway on a password URL")
    scheme, _, rest = url.partition("://")
    user, _, host = rest.partition("@")
    secret_url = f"{scheme}://{user.split(':')[0]}:s3cret-pw-123@{host}"  # trust auth ignores the password
    proc = subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--port", str(free_port),
                             "--database-url", secret_url], stderr=subprocess.PIPE, text=True, env={**os.environ, "MIXROUTE_CLASSIFIER": "off"})
    try:
        deadline, lines = time.monotonic() + 60, []
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            lines.append(line)
            if "serving" in line or not line:
                break
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    banner = "".join(lines)
    assert "serving" in banner and "s3cret-pw-123" not in banner and "***" in banner, banner


def test_port_in_use_is_one_line_and_a_near_miss_setting_is_named():
    """A port another server holds: one line and exit 2 (was uvicorn's error, exit 3). A
    misspelt MIXROUTE_ variable is named with the setting it nearly spells; one far from any
    setting (a policy's own variable) is not mentioned."""
    import socket

    with socket.create_server(("127.0.0.1", 0)) as held:
        port = held.getsockname()[1]
        res = _serve("--port", str(port), MIXROUTE_POLICY_PTH="p.yaml", MIXROUTE_MY_UPSTREAM="http://x")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert f"127.0.0.1:{port} is already in use" in res.stderr
    assert "MIXROUTE_POLICY_PTH is not a setting and is ignored; did you mean MIXROUTE_POLICY_PATH?" in res.stderr
    assert "MIXROUTE_MY_UPSTREAM" not in res.stderr


def _children(pid: int) -> set[int]:
    """Processes whose parent is ``pid`` (from /proc)."""
    out = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.add(int(stat.parent.name))
    return out


def test_stopping_the_gateway_stops_the_dashboard_worker(tmp_path, free_port):
    """From a fresh-user pass: the dashboard's worker process (spawned on the first summary)
    outlived every gateway, holding ~84 MB and its database connections."""
    import signal
    import time

    import httpx

    if not Path("/proc/self/stat").exists():
        import pytest

        pytest.skip("needs /proc to find the worker process")
    port = str(free_port)  # not a fixed one: another gateway on it would answer in its place
    proc = subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--port", port, "--database-url",
                             f"sqlite:///{tmp_path / 'd.db'}"], cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env={**os.environ, "MIXROUTE_CLASSIFIER": "off"})
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(200):
            try:
                if httpx.get(base + "/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        assert httpx.get(base + "/dashboard/api/summary", timeout=60).status_code == 200
        workers = _children(proc.pid)
        assert workers, "the summary ran in a worker process"
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        time.sleep(0.5)
        assert not [p for p in workers if Path(f"/proc/{p}").exists()
                    and "Z" not in Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0]]
    finally:
        if proc.poll() is None:
            proc.kill()


def test_the_start_banner_tells_an_unreachable_store_from_a_store_without_keys(tmp_path):
    """From a fresh-user pass: with the database down, `serve` said "auth is OFF (no keys
    exist)" and then refused every request with 503 auth_unavailable."""
    from gateway.serve import _auth_configured
    from gateway.settings import Settings

    down = Settings(database_url="postgresql+psycopg://postgres@127.0.0.1:1/mixroute_down")
    assert _auth_configured(down) is None
    assert _auth_configured(Settings(database_url=f"sqlite:///{tmp_path}/new.db")) is False
    assert _auth_configured(Settings(database_url="sqlite:///x.db", admin_key="adm-0123456789abcdef")) is True


def test_a_plain_install_warns_with_the_classifier_extra(tmp_path):
    """From a fresh-user pass: a plain `pip install -e .` started with "classifier not loaded
    (No module named 'numpy')", which names neither torch nor the extra to install."""
    (tmp_path / "numpy.py").write_text("raise ImportError(\"No module named 'numpy'\", name='numpy')\n")
    code = ("import logging; logging.basicConfig(format='%(message)s')\n"
            "from gateway.app import load_predictor\nfrom gateway.settings import Settings\n"
            "assert load_predictor(Settings()) is None\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"})
    assert res.returncode == 0, res.stderr[-2000:]
    assert "classifier not loaded (numpy" in res.stderr and "'mixroute[classifier]'" in res.stderr
    assert "pip install torch==2.13.0 -e '.[classifier]'" in res.stderr  # from a checkout, as the README says


def test_policy_validate_works_on_a_plain_install(tmp_path):
    """From a fresh-user pass: on `pip install -e .` (no numpy) `policy validate` printed "ok",
    then a traceback and exit 1, from the import of its quality-head notes."""
    (tmp_path / "numpy.py").write_text("raise ImportError(\"No module named 'numpy'\", name='numpy')\n")
    policy = tmp_path / "p.yaml"
    policy.write_text("version: 1\nbackends:\n  - {name: a, kind: fake, model: mystery-model}\n"
                      "routes:\n  - {name: auto, backends: [a]}\n")
    res = subprocess.run([sys.executable, "-m", "gateway.cli", "policy", "validate", str(policy)],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"})
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert f"{policy}: ok" in res.stdout
    assert "the quality head does not know model 'mystery-model'" in res.stderr  # the notes still come
