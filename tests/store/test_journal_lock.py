"""One journal, one process: a second gateway given another's journal is refused at start
(rows replayed twice otherwise), and two gateways started in one folder each get their own."""

from __future__ import annotations

import asyncio
import pytest

from bench.fault_env import GatewayProcess
from gateway.settings import Settings
from gateway.store.journal import Journal
from gateway.store.journal_lock import JournalInUse, journal_holder
from gateway.store.rows import default_journal_path
from gateway.store.writer import Store


def test_a_held_journal_cannot_be_locked_again_until_released(tmp_path) -> None:
    first, second = Journal(tmp_path / "j.jsonl"), Journal(tmp_path / "j.jsonl")
    first.lock()
    with pytest.raises(JournalInUse, match="in use by another mixroute process"):
        second.lock()
    assert journal_holder(tmp_path / "j.jsonl") is not None
    first.unlock()
    assert journal_holder(tmp_path / "j.jsonl") is None
    second.lock()
    second.unlock()
    assert not (tmp_path / "j.jsonl.lock").exists()  # no litter once released


def test_a_lock_file_removed_by_its_last_holder_is_not_shared(tmp_path) -> None:
    """A process that opened the lock file just before its holder released and removed it
    must not lock the removed file while a third process locks the new one."""
    import fcntl
    import os

    lock = tmp_path / "j.jsonl.lock"
    first = Journal(tmp_path / "j.jsonl")
    first.lock()
    stale = os.open(lock, os.O_RDWR)  # opened before the release
    first.unlock()
    fcntl.flock(stale, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the removed file's lock: taken by nobody now
    second = Journal(tmp_path / "j.jsonl")
    second.lock()  # locks a new file at the path, not the removed one
    assert lock.exists() and os.stat(lock).st_ino != os.fstat(stale).st_ino
    with pytest.raises(JournalInUse):
        Journal(tmp_path / "j.jsonl").lock()
    os.close(stale)
    second.unlock()


def test_a_store_refuses_a_journal_another_store_holds(tmp_path) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path}/s.db", store_journal_path=tmp_path / "j.jsonl")

    async def run() -> None:
        async with Store(settings):
            with pytest.raises(JournalInUse):
                await Store(settings).start()

    asyncio.run(run())


def test_default_journal_includes_the_port() -> None:
    url = "postgresql://u@h/db"
    assert default_journal_path(url, 8001) != default_journal_path(url, 8002)
    assert default_journal_path(url, 8001).name.endswith("-8001.jsonl")


def test_two_gateways_in_one_folder_get_their_own_journals_and_a_shared_one_is_refused(tmp_path) -> None:
    env = {"MIXROUTE_DATABASE_URL": f"sqlite:///{tmp_path}/shared.db"}
    a = GatewayProcess(None, env, cwd=tmp_path)
    b = GatewayProcess(None, env, cwd=tmp_path)
    try:
        a.start()
        b.start()
        ja = default_journal_path(env["MIXROUTE_DATABASE_URL"], a.port)
        jb = default_journal_path(env["MIXROUTE_DATABASE_URL"], b.port)
        assert ja != jb
        assert journal_holder(ja) == f"pid {a.proc.pid}" and journal_holder(jb) == f"pid {b.proc.pid}"
        res = GatewayProcess(None, {**env, "MIXROUTE_STORE_JOURNAL_PATH": str(ja)}, cwd=tmp_path).run_to_exit()
        assert res.returncode == 2, res.stderr
        assert f"the store journal {ja} is in use by another mixroute process (pid {a.proc.pid})" in res.stderr
        assert "Traceback" not in res.stderr
    finally:
        a.stop()
        b.stop()
