"""Real processes for fault tests and the fault suite (:mod:`bench.faults`): a private
PostgreSQL, a private Redis and gateway processes, each on a free loopback port, started and
stopped by the caller (never the shared servers).

PostgreSQL: ``initdb`` + ``pg_ctl`` from the local installation, into a fresh temporary
directory, with trust auth. PostgreSQL refuses to run as root, so as root the server runs as
the ``postgres`` user (``runuser -u postgres --``). :func:`unavailable` says why no server
can be started here, for ``pytest.skip``.
"""

from __future__ import annotations

import glob
import os
import signal
import sys
import time
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import httpx

_RUN_AS = "postgres"
_REPO = Path(__file__).resolve().parents[1]


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


def free_port() -> int:
    """A loopback TCP port nobody listens on now."""
    return _free_port()


class PrivateRedis:
    """One throw-away ``redis-server`` (no persistence): :meth:`start`, :meth:`kill` (and
    start again, empty), :meth:`pause` / :meth:`resume` (SIGSTOP / SIGCONT: a hang)."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or _free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                                      "--save", "", "--appendonly", "no"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.02)
        raise RuntimeError(f"redis-server did not listen on {self.port}")

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None

    def pause(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)


class GatewayProcess:
    """``mixroute serve`` in a child process on a free port.

    Args:
        policy: the policy YAML file (``None``: the bundled demo policy).
        env: ``MIXROUTE_*`` settings for this gateway (added to the parent's environment).
        cwd: the working directory (a gateway's default journal lives there).
        port: the port to serve on (default: a free one).
    """

    def __init__(self, policy: Path | None, env: dict[str, str] | None = None, cwd: Path | None = None,
                 port: int | None = None) -> None:
        self.port = port or _free_port()
        self.policy = policy
        # The checkout this module is in comes first on the path: the child runs in another
        # directory, where an installed (or editable-installed elsewhere) mixroute would win.
        path = os.pathsep.join(p for p in (str(_REPO), os.environ.get("PYTHONPATH", "")) if p)
        self.env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "HF_HUB_OFFLINE": "1",
                    "MIXROUTE_CLASSIFIER": "off", "PYTHONPATH": path, **(env or {})}
        self.cwd = cwd or Path(tempfile.mkdtemp(prefix="mixroute-gw-"))
        self.proc: subprocess.Popen | None = None
        self.log = self.cwd / f"gateway-{self.port}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        """The ``mixroute serve`` command line of this gateway."""
        policy = ["--policy", str(self.policy)] if self.policy is not None else []
        return [sys.executable, "-m", "gateway.cli", "serve", *policy, "--port", str(self.port)]

    def run_to_exit(self, timeout_s: float = 60) -> subprocess.CompletedProcess:
        """Run the gateway in the foreground, for one that should refuse to start: its exit
        status and output (raises ``subprocess.TimeoutExpired`` if it serves instead)."""
        return subprocess.run(self.command(), env=self.env, cwd=self.cwd, capture_output=True, text=True,
                              timeout=timeout_s)

    def start(self, timeout_s: float = 60) -> None:
        out = self.log.open("ab")
        self.proc = subprocess.Popen(self.command(), env=self.env, cwd=self.cwd, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gateway exited ({self.proc.returncode}): {self.log.read_text()[-2000:]}")
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code < 500:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"gateway did not answer /healthz in {timeout_s} s: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None
