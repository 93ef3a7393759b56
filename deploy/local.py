"""A production-like mixroute stack without containers, on loopback: PostgreSQL and Redis
(used where they already answer, else private ones started under the state folder), the
store migrated, two gateways (each with its own spill journal) and a two-replica fake vLLM
pool (``deploy/compose/fake_vllm.py``, the benchmark's replica model).

::

    python -m deploy.local up     # start what is missing, print the URLs and the admin key
    python -m deploy.local status # what runs
    python -m deploy.local down   # stop what `up` started (--purge: delete the state folder)

Everything ``up`` starts is recorded in ``<state>/stack.json`` (the pid file ``down``
reads); a PostgreSQL or Redis that was already running is used and never stopped. See
docs/DEPLOY.md, "Without containers".
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import yaml

REPO = Path(__file__).resolve().parent.parent
COMPOSE_POLICY = REPO / "deploy" / "compose" / "policy" / "policy.yaml"
POOL_BACKEND = "llama-3.1-8b-instruct"
PG_USER = "postgres"


class StackError(RuntimeError):
    """Something the stack needs is missing or did not start; the message says what to do."""


def listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _ports(text: str, n: int, what: str) -> list[int]:
    ports = [int(p) for p in text.split(",") if p.strip()]
    if len(ports) != n:
        raise StackError(f"--{what} needs {n} comma-separated ports, got {text!r}")
    return ports


# -- PostgreSQL --------------------------------------------------------------------------------

def _pg_bindir() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parent.parent.name)
                   if p.parent.parent.name.isdigit() else 0)
    initdb = found[-1] if found else (Path(shutil.which("initdb")) if shutil.which("initdb") else None)
    if initdb is None:
        raise StackError("no PostgreSQL server binaries (initdb, pg_ctl): install PostgreSQL, or pass "
                         "--database-url of a running server")
    return initdb.parent


def _as_pg_user() -> list[str]:
    """PostgreSQL refuses to run as root: as root its tools run as the ``postgres`` user."""
    return ["runuser", "-u", PG_USER, "--"] if os.geteuid() == 0 else []


def _pg(tool: str, *args: str, timeout: float = 90) -> None:
    proc = subprocess.run([*_as_pg_user(), str(_pg_bindir() / tool), *args], capture_output=True, text=True,
                          timeout=timeout)
    if proc.returncode != 0:
        raise StackError(f"{tool} failed ({proc.returncode}): {proc.stderr.strip()[-1500:]}")


def start_postgres(state: Path, port: int) -> None:
    """initdb (once) and start a private server on ``port``, data in ``<state>/pg``."""
    data = state / "pg" / "data"
    if os.geteuid() == 0:
        user = pwd.getpwnam(PG_USER)
        (state / "pg").mkdir(exist_ok=True)
        os.chown(state / "pg", user.pw_uid, user.pw_gid)
        if subprocess.run(["runuser", "-u", PG_USER, "--", "test", "-w", str(state / "pg")]).returncode != 0:
            raise StackError(f"the {PG_USER} user cannot write {state / 'pg'} (a parent folder is private): choose a "
                             "--state-dir it can reach, e.g. /tmp/mixroute-local")
    else:
        (state / "pg").mkdir(exist_ok=True)
    if not (data / "PG_VERSION").exists():
        _pg("initdb", "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
    sockets = state / "pg" if len(str(state / "pg")) < 90 else Path("/tmp")  # unix socket paths are short
    _pg("pg_ctl", "-D", str(data), "-l", str(state / "pg" / "server.log"), "-w", "-t", "60", "-o",
        f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1", "start")


def ensure_database(port: int, name: str = "mixroute") -> str:
    """The URL of database ``name`` on the server at ``port`` (created if missing)."""
    import psycopg

    with psycopg.connect(f"host=127.0.0.1 port={port} user=postgres dbname=postgres", autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
            conn.execute(f'CREATE DATABASE "{name}"')
    return f"postgresql+psycopg://postgres@127.0.0.1:{port}/{name}"


def stop_postgres(state: Path) -> None:
    _pg("pg_ctl", "-D", str(state / "pg" / "data"), "-m", "fast", "-w", "-t", "60", "stop")


# -- Redis -------------------------------------------------------------------------------------

def start_redis(state: Path, port: int) -> int:
    """A private ``redis-server`` on ``port`` (no persistence); returns its pid."""
    if shutil.which("redis-server") is None:
        raise StackError("redis-server is not installed: install Redis, or pass --redis-url of a running server")
    pidfile = state / "redis.pid"
    subprocess.run(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                    "--daemonize", "yes", "--pidfile", str(pidfile), "--logfile", str(state / "redis.log"),
                    "--dir", str(state)], check=True)
    _wait(lambda: listening(port) and pidfile.exists(), 20, f"redis-server on port {port}")
    return int(pidfile.read_text().strip())


# -- processes ---------------------------------------------------------------------------------

def spawn(cmd: list[str], env: dict[str, str], log: Path, cwd: Path) -> int:
    """Start a detached child (its own session: it outlives `up`); returns its pid."""
    with log.open("ab") as out:
        proc = subprocess.Popen(cmd, env={**os.environ, **env}, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    return proc.pid


def _wait(ready, timeout_s: float, what: str, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if ready():
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    tail = log.read_text(errors="replace")[-1500:] if log is not None and log.exists() else ""
    raise StackError(f"{what} did not start within {timeout_s:.0f} s" + (f"; its log ends:\n{tail}" if tail else ""))


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ")[-1].startswith("Z"))


def terminate(pid: int, timeout_s: float = 20) -> None:
    """SIGTERM, then SIGKILL after ``timeout_s``; a pid that is gone already is fine."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout_s
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if alive(pid):
        os.kill(pid, signal.SIGKILL)


def write_policy(state: Path, replicas: list[int]) -> Path:
    """The compose stack's policy with its vLLM pool pointed at the local replicas."""
    policy = yaml.safe_load(COMPOSE_POLICY.read_text())
    for backend in policy["backends"]:
        if backend["name"] == POOL_BACKEND:
            backend["endpoints"] = [f"http://127.0.0.1:{p}/v1" for p in replicas]
    path = state / "policy.yaml"
    path.write_text("# Written by `python -m deploy.local up` from deploy/compose/policy/policy.yaml.\n"
                    + yaml.safe_dump(policy, sort_keys=False))
    return path


# -- commands ----------------------------------------------------------------------------------

def up(args) -> dict:
    """Start the stack; returns what was started (also written to ``<state>/stack.json``)."""
    state = Path(args.state_dir).resolve()
    state.mkdir(parents=True, exist_ok=True)
    record = state / "stack.json"
    if record.exists() and any(alive(p) for p in json.loads(record.read_text())["pids"].values()):
        raise StackError(f"a stack recorded in {record} is running: `python -m deploy.local down "
                         f"--state-dir {args.state_dir}` first")
    gateways, replicas = _ports(args.gateway_ports, 2, "gateway-ports"), _ports(args.replica_ports, 2, "replica-ports")
    busy = [p for p in gateways + replicas if listening(p)]
    if busy:
        raise StackError(f"ports {', '.join(map(str, busy))} are in use: choose others with --gateway-ports / "
                         "--replica-ports")
    stack: dict = {"state_dir": str(state), "pids": {}, "started": [], "urls": {}}
    try:
        return _start(args, state, gateways, replicas, stack)
    finally:
        record.write_text(json.dumps(stack, indent=2))


def _start(args, state: Path, gateways: list[int], replicas: list[int], stack: dict) -> dict:
    database_url = args.database_url
    if database_url is None:
        if not listening(args.pg_port):
            start_postgres(state, args.pg_port)
            stack["started"].append("postgres")
        database_url = ensure_database(args.pg_port)
    redis_url = args.redis_url
    if redis_url is None:
        if not listening(args.redis_port):
            stack["pids"]["redis"] = start_redis(state, args.redis_port)
            stack["started"].append("redis")
        redis_url = f"redis://127.0.0.1:{args.redis_port}/0"
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    subprocess.run([sys.executable, "-m", "gateway.cli", "db", "upgrade", "--database-url", database_url],
                   check=True, env={**os.environ, **env}, cwd=state, stdout=subprocess.DEVNULL)
    for i, port in enumerate(replicas):
        log = state / f"fake-vllm-{i}.log"
        stack["pids"][f"fake-vllm-{i}"] = spawn(
            [sys.executable, str(REPO / "deploy" / "compose" / "fake_vllm.py")],
            {**env, "FAKE_VLLM_HOST": "127.0.0.1", "FAKE_VLLM_PORT": str(port), "FAKE_VLLM_MODEL": POOL_BACKEND},
            log, state)
        _wait(lambda port=port: httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200, 60,
              f"fake vLLM replica {i}", log)
        stack["urls"][f"fake-vllm-{i}"] = f"http://127.0.0.1:{port}/v1"
    policy = Path(args.policy).resolve() if args.policy else write_policy(state, replicas)
    admin_key = os.environ.get("MIXROUTE_ADMIN_KEY") or _admin_key(state)
    for i, port in enumerate(gateways):
        home = state / f"gateway-{i + 1}"
        home.mkdir(exist_ok=True)
        log = home / "gateway.log"
        stack["pids"][f"gateway-{i + 1}"] = spawn(
            [sys.executable, "-m", "gateway.cli", "serve", "--policy", str(policy), "--port", str(port)],
            {**env, "MIXROUTE_DATABASE_URL": database_url, "MIXROUTE_REDIS_URL": redis_url,
             "MIXROUTE_ADMIN_KEY": admin_key, "MIXROUTE_HOST": "127.0.0.1", "MIXROUTE_CLASSIFIER": args.classifier,
             "MIXROUTE_STORE_JOURNAL_PATH": str(home / "journal.jsonl")}, log, home)
        stack["urls"][f"gateway-{i + 1}"] = f"http://127.0.0.1:{port}"
    for i, port in enumerate(gateways):
        _wait(lambda port=port: httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200,
              args.timeout, f"gateway-{i + 1}", state / f"gateway-{i + 1}" / "gateway.log")
    stack["urls"].update(database=database_url, redis=redis_url)
    stack["admin_key_file"] = str(state / "admin_key")
    return stack


def _admin_key(state: Path) -> str:
    path = state / "admin_key"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(24))
        path.chmod(0o600)
    return path.read_text().strip()


def down(args) -> list[str]:
    """Stop what `up` recorded; returns what was stopped."""
    state = Path(args.state_dir).resolve()
    record = state / "stack.json"
    if not record.exists():
        raise StackError(f"nothing recorded in {record}: no stack was started with this --state-dir")
    stack = json.loads(record.read_text())
    stopped = []
    for name, pid in reversed(stack["pids"].items()):  # gateways first: they flush to the store
        if alive(pid):
            terminate(pid)
            stopped.append(name)
    if "postgres" in stack["started"]:
        try:
            stop_postgres(state)
            stopped.append("postgres")
        except StackError as exc:
            print(f"warning: {exc}", file=sys.stderr)
    record.unlink()
    if args.purge:
        shutil.rmtree(state, ignore_errors=True)
    return stopped


def _print_up(stack: dict) -> None:
    urls = stack["urls"]
    print("mixroute local stack is up")
    for name in ("gateway-1", "gateway-2"):
        print(f"  {name}:   {urls[name]}   (dashboard {urls[name]}/dashboard, metrics {urls[name]}/metrics)")
    for name in ("fake-vllm-0", "fake-vllm-1"):
        print(f"  {name}: {urls[name]}")
    print(f"  database:    {urls['database']}")
    print(f"  redis:       {urls['redis']}")
    print(f"  admin key:   in {stack['admin_key_file']} (or MIXROUTE_ADMIN_KEY)")
    print(f"  logs, journals and the pid file (stack.json): {stack['state_dir']}")
    print("stop it with: python -m deploy.local down" + _state_flag(stack["state_dir"]))


def _state_flag(state_dir: str) -> str:
    return "" if Path(state_dir) == Path(".mixroute-local").resolve() else f" --state-dir {state_dir}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.local", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("up", "down", "status"):
        p = sub.add_parser(name)
        p.add_argument("--state-dir", default=".mixroute-local", help="logs, journals, data, pid file")
        if name == "down":
            p.add_argument("--purge", action="store_true", help="also delete the state folder (its database too)")
        if name == "up":
            p.add_argument("--pg-port", type=int, default=5432, help="PostgreSQL port (used if it answers)")
            p.add_argument("--redis-port", type=int, default=6379, help="Redis port (used if it answers)")
            p.add_argument("--database-url", help="use this store instead (no PostgreSQL is started)")
            p.add_argument("--redis-url", help="use this Redis instead (none is started)")
            p.add_argument("--gateway-ports", default="8001,8002")
            p.add_argument("--replica-ports", default="8101,8102")
            p.add_argument("--policy", help="policy file (default: the compose policy on the local pool)")
            p.add_argument("--classifier", default="off", choices=("auto", "on", "off"),
                           help="MIXROUTE_CLASSIFIER of the gateways (off: fast start, priors only)")
            p.add_argument("--timeout", type=float, default=120, help="seconds a gateway may take to be ready")
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            _print_up(up(args))
        elif args.command == "down":
            stopped = down(args)
            print("stopped: " + (", ".join(stopped) or "nothing was running"))
        else:
            record = Path(args.state_dir).resolve() / "stack.json"
            stack = json.loads(record.read_text()) if record.exists() else {"pids": {}}
            for name, pid in stack["pids"].items():
                print(f"{name}\t{pid}\t{'running' if alive(pid) else 'stopped'}")
    except (StackError, subprocess.CalledProcessError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        if args.command == "up":
            print("stop what did start with: python -m deploy.local down" + _state_flag(str(
                Path(args.state_dir).resolve())), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
