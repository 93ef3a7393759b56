"""The gateway ``mixroute replay`` talks to: a local one it starts and stops
(:func:`local_gateway`), or a running one it checks before sending (:func:`check_route`).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from backends.replay.plan import ReplayPlan

#: Repository root, put on the gateway subprocess's PYTHONPATH.
_ROOT = Path(__file__).resolve().parents[2]
#: Environment variables the local gateway subprocess does not inherit (see local_gateway).
_PRIVATE_ENV = frozenset({"MIXROUTE_ADMIN_KEY", "MIXROUTE_REDIS_URL"})


class ReplayFailed(Exception):
    """The replay could not run (bad data, or the gateway did not start)."""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 at the time of the call."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def local_gateway(plan: "ReplayPlan", *, timeout_s: float = 180.0, policy: Path | None = None,
                  store: Path | None = None) -> Iterator[str]:
    """Serve ``plan``'s policy (or the ``policy`` file) from a gateway subprocess; yield its base URL.

    The subprocess runs in a temporary folder (policy, SQLite store, log) removed at the
    end; with ``store``, its SQLite store is that file instead, kept afterwards (to read
    the run's decisions, e.g. with ``mixroute policy what-if --logs``). It is stopped (SIGTERM, then SIGKILL after 15 s) however the block exits. It does
    not inherit ``MIXROUTE_ADMIN_KEY`` (its throw-away store has no keys, so auth is off on
    loopback) nor ``MIXROUTE_REDIS_URL`` (a replay must not touch shared limits or budgets).
    Its classifier ignores outcome-memory rows identical to a replayed prompt
    (``MIXROUTE_CLASSIFIER_MEMORY=exclude-exact``, unless set to ``off``): the data replayed
    may be the data the memory was built from.

    Raises:
        ReplayFailed: the gateway exited or was not ready within ``timeout_s`` seconds
            (the message ends with its log's last lines).
    """
    with tempfile.TemporaryDirectory(prefix="mixroute-replay-") as tmp:
        folder = Path(tmp)
        if policy is not None:
            if not policy.is_file():
                raise ReplayFailed(f"--policy {policy}: " + ("a folder, not a policy file" if policy.is_dir()
                                                             else "no such file"))
            policy = policy.resolve()
        else:
            policy = plan.write_policy(folder / "policy.yaml")
        port = free_port()
        cmd = [sys.executable, "-m", "gateway.cli", "serve", "--policy", str(policy), "--host", "127.0.0.1",
               "--port", str(port), "--database-url",
               f"sqlite:///{store.resolve() if store is not None else folder / 'replay.db'}"]
        env = {k: v for k, v in os.environ.items() if k not in _PRIVATE_ENV}
        env["MIXROUTE_POLICY_WATCH"] = "false"  # the generated policy never changes
        if env.get("MIXROUTE_CLASSIFIER_MEMORY", "on") == "on":
            env["MIXROUTE_CLASSIFIER_MEMORY"] = "exclude-exact"  # a replayed row is not its own neighbour
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_ROOT), os.environ.get("PYTHONPATH")]))
        log_path = folder / "gateway.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(cmd, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)
            try:
                url = f"http://127.0.0.1:{port}"
                _wait_ready(proc, url, timeout_s, log_path)
                yield url
            finally:
                _stop(proc)


def _wait_ready(proc: subprocess.Popen, url: str, timeout_s: float, log_path: Path) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=2.0) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise ReplayFailed(f"the gateway exited with status {proc.returncode}:\n{_tail(log_path)}")
            with contextlib.suppress(httpx.HTTPError):
                if client.get(f"{url}/readyz").status_code == 200:
                    return
            time.sleep(0.2)
    raise ReplayFailed(f"the gateway was not ready after {timeout_s:.0f} s:\n{_tail(log_path)}")


def check_route(url: str, route: str, api_key: str | None) -> dict | None:
    """Raise :class:`ReplayFailed` when the gateway cannot be reached, refuses the key, or
    lists its models and ``route`` is not one of them (every request would fail the same
    way); an unreadable model list is not an error.

    Returns:
        the route's quality bar as ``GET /v1/models`` shows it (``None``: not shown, e.g. a
        backend name or another gateway)."""
    import httpx

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        resp = httpx.get(f"{url}/v1/models", headers=headers, timeout=5.0)
    except (httpx.TransportError, httpx.InvalidURL, ValueError) as exc:
        raise ReplayFailed(f"cannot reach the gateway at {url!r} ({type(exc).__name__}: {exc}); "
                           "give its base URL, e.g. --gateway http://127.0.0.1:8000") from None
    if resp.status_code in (401, 403):
        raise ReplayFailed(f"the gateway at {url} refused the key (HTTP {resp.status_code}); pass --api-key")
    try:
        models = resp.json()["data"]
        ids = [m["id"] for m in models]
    except (ValueError, KeyError, TypeError):
        return None
    if ids and route not in ids:
        raise ReplayFailed(f"--route {route!r}: the gateway serves no such route or backend "
                           f"(models: {', '.join(ids[:20])}{' ...' if len(ids) > 20 else ''})")
    bar = next((m.get("mixroute", {}).get("quality_bar") for m in models if m.get("id") == route), None)
    return bar if isinstance(bar, dict) else None


def gateway_predictor(url: str) -> tuple[str | None, dict | None]:
    """``(predictor, classifier)`` as ``/readyz`` reports them: the predictor's name
    (``PriorPredictor``, ``ClassifierPredictor``...) and, for the classifier, its precision,
    heads and outcome memory settings (``k``, ``task_smoothing``...); ``None`` where not
    reported."""
    import httpx

    with contextlib.suppress(httpx.HTTPError, ValueError, AttributeError):
        body = httpx.get(f"{url}/readyz", timeout=5.0).json()
        return body.get("predictor"), body.get("classifier")
    return None, None


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
