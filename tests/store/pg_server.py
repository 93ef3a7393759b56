"""A private PostgreSQL server for tests that must stop and start the database.

``initdb`` + ``pg_ctl`` from the local PostgreSQL installation, into a fresh temporary
directory, on a free loopback port, with trust auth. PostgreSQL refuses to run as root,
so as root the server runs as the ``postgres`` user (``runuser -u postgres --``).
:func:`unavailable` says why no server can be started here, for ``pytest.skip``.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

_RUN_AS = "postgres"


def _bindir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0)
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def unavailable() -> str | None:
    """Why a private server cannot be started here, or ``None`` if it can."""
    if _bindir() is None:
        return "no PostgreSQL server binaries (initdb, pg_ctl) in /usr/lib/postgresql/*/bin or on PATH"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(_RUN_AS)
        except KeyError:
            return f"running as root and there is no {_RUN_AS!r} user to run PostgreSQL as"
        if shutil.which("runuser") is None:
            return "running as root and runuser is missing"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PrivatePostgres:
    """One throw-away server: :meth:`start`, :meth:`stop` (and start again), :meth:`destroy`."""

    def __init__(self) -> None:
        bindir = _bindir()
        assert bindir is not None, unavailable()
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="mixroute-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self._as_user: list[str] = []
        if os.geteuid() == 0:
            user = pwd.getpwnam(_RUN_AS)
            os.chown(self.root, user.pw_uid, user.pw_gid)
            self._as_user = ["runuser", "-u", _RUN_AS, "--"]
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8")

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str, timeout: float = 60) -> None:
        cmd = [*self._as_user, str(self.bindir / tool), *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=self.root)
        if proc.returncode != 0:
            log = (self.root / "server.log")
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(f"{tool} failed ({proc.returncode}): {proc.stderr[-2000:]}\n{tail}")

    def start(self) -> None:
        opts = (f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
                "-c synchronous_commit=off -c full_page_writes=off -c max_connections=100")
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "server.log"), "-w", "-t", "30",
                  "-o", opts, "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "30", "stop")

    def destroy(self) -> None:
        try:
            self.stop("immediate")
        except (RuntimeError, subprocess.TimeoutExpired):
            pass  # not running
        shutil.rmtree(self.root, ignore_errors=True)
