"""Hot reload: a good edit is applied atomically, a bad edit is rejected and the old
policy stays live; each decision stores the hash of the policy that made it."""

from __future__ import annotations

import time

import httpx

from tests.gateway.conftest import start_gateway

POLICY = """version: 1
backends:
  - {name: one, kind: fake, model: model-one, quality: 0.9}
routes:
  - {name: auto, backends: [one]}
"""


def _wait_for(pred, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.1)
    return False


def test_hot_reload(tmp_path):
    gw = start_gateway(tmp_path, POLICY, policy_watch=True)
    try:
        path = tmp_path / "policy.yaml"
        first = httpx.get(gw.url + "/readyz").json()["policy_hash"]
        time.sleep(0.5)  # let the watcher start

        def ids():
            return {m["id"] for m in httpx.get(gw.v1 + "/models").json()["data"]}

        path.write_text(POLICY.replace("routes:", "  - {name: two, kind: fake, model: model-two, quality: 0.5}\nroutes:"))
        assert _wait_for(lambda: "two" in ids()), "good edit was not applied"
        second = httpx.get(gw.url + "/readyz").json()["policy_hash"]
        assert second != first

        path.write_text("version: 1\nbackends: [oops\n")
        time.sleep(1.0)
        assert "two" in ids(), "bad edit replaced the live policy"
        assert httpx.get(gw.url + "/readyz").json()["policy_hash"] == second
        resp = httpx.post(gw.v1 + "/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
        assert resp.status_code == 200

        # Edits that once stopped the watcher for good (custom tags, recursive aliases) are
        # rejected like any bad edit, and a later good edit still applies.
        path.write_text(POLICY.replace("model: model-one", "model: !env FOO"))
        time.sleep(0.6)
        path.write_text("version: 1\na: &a [*a]\n")
        time.sleep(0.6)
        assert httpx.get(gw.url + "/readyz").json()["policy_hash"] == second
        path.write_text(POLICY.replace("quality: 0.9", "quality: 0.7"))
        assert _wait_for(lambda: httpx.get(gw.url + "/readyz").json()["policy_hash"] not in (first, second))
    finally:
        gw.stop()


def test_other_files_in_the_policy_folder_do_not_wake_the_watcher(tmp_path, caplog):
    """A log file or the SQLite WAL next to the policy once woke the watcher on every write,
    and watchfiles' INFO line per wake-up then fed a log file there forever."""
    import logging

    caplog.set_level(logging.INFO, logger="watchfiles.main")
    gw = start_gateway(tmp_path, POLICY, policy_watch=True)
    try:
        time.sleep(0.5)  # let the watcher start
        for i in range(5):
            (tmp_path / "serve.log").write_text(f"line {i}\n")
            time.sleep(0.1)
        time.sleep(0.6)
        woke = [r for r in caplog.records if r.name == "watchfiles.main" and "detected" in r.getMessage()]
        assert not woke, [r.getMessage() for r in woke]
        (tmp_path / "policy.yaml").write_text(POLICY.replace("quality: 0.9", "quality: 0.8"))
        assert _wait_for(lambda: any(r.name == "watchfiles.main" and "detected" in r.getMessage()
                                     for r in caplog.records)), "the policy's own edit did not wake the watcher"
    finally:
        gw.stop()


def test_bad_options_or_missing_data_in_a_reload_are_one_line_and_keep_the_policy(tmp_path, caplog):
    """Bad vllm options failed in the backend's constructor: "policy reload failed unexpectedly"
    with a traceback. Now the loader rejects them (and missing replay data) with file:line."""
    import logging

    caplog.set_level(logging.ERROR, logger="mixroute.policy")
    gw = start_gateway(tmp_path, POLICY, policy_watch=True)
    try:
        path = tmp_path / "policy.yaml"
        first = httpx.get(gw.url + "/readyz").json()["policy_hash"]
        time.sleep(0.5)  # let the watcher start
        edits = [
            ("  - {name: pool, kind: vllm, model: m, endpoints: ['http://127.0.0.1:9/v1'],\n"
             "     options: {affinity: maybe}}\n", f"{path}:5 backends[1].options.affinity: Input should be a valid "
                                                  "boolean, unable to interpret input"),
            ("  - {name: rp, kind: replay, model: m, data: [gone.csv]}\n",
             f"{path}:4 backends[1].data[0]: file not found: {tmp_path}/gone.csv"),
            # readable data without the backend's model: found when the data is loaded, at the policy's line
            ("  - {name: rp, kind: replay, model: m, data: [other.csv]}\n",
             f"{path}:4 backends[1].model: model 'm' is not in the backend's data (models: other-model)"),
        ]
        (tmp_path / "other.csv").write_text('prompt,other-model\n"hi",True\n')
        for backend, problem in edits:
            caplog.clear()
            path.write_text(POLICY.replace("routes:", backend + "routes:"))
            assert _wait_for(lambda: caplog.records), "the bad edit was not rejected"
            [record] = caplog.records
            assert record.getMessage().splitlines()[1:] == [problem] and record.exc_info is None
            assert "unexpectedly" not in record.getMessage()
            assert httpx.get(gw.url + "/readyz").json()["policy_hash"] == first
    finally:
        gw.stop()


async def test_a_reload_keeps_the_backends_whose_configuration_did_not_change(tmp_path, monkeypatch):
    """From a fresh-user pass: any reload rebuilt every backend, so an edit to one hosted
    backend's quality emptied a vLLM pool's prefix-affinity table and health state (9 of 12
    sessions then landed on a replica without their prefix). Unchanged backends are kept,
    running, and closed once, by the last runtime that holds them."""
    import asyncio

    import gateway.runtime as runtime_module
    from gateway.runtime import PolicyHolder

    monkeypatch.setattr(runtime_module, "DRAIN_GRACE_S", 0.0)
    policy = tmp_path / "policy.yaml"
    text = ("version: 1\nbackends:\n  - {name: a, kind: fake, model: a, quality: 0.8}\n"
            "  - {name: b, kind: fake, model: b, quality: 0.7}\nroutes:\n  - {name: auto, backends: [a, b]}\n")
    policy.write_text(text)
    holder = PolicyHolder(policy, None)
    first = await holder.load()
    closed = []
    for name, backend in first.backends.items():
        original = backend.aclose

        async def aclose(name=name, original=original):
            closed.append(name)
            await original()

        backend.aclose = aclose
    try:
        policy.write_text(text.replace("quality: 0.7", "quality: 0.75"))  # only b changes
        assert await holder.reload()
        second = holder.current
        assert second.backends["a"] is first.backends["a"] and second.backends["b"] is not first.backends["b"]
        for _ in range(50):
            if closed:
                break
            await asyncio.sleep(0.01)
        assert closed == ["b"]  # the old b; a is still in use
    finally:
        await holder.aclose()
    assert sorted(closed) == ["a", "b"]  # at shutdown the kept a is closed, once
