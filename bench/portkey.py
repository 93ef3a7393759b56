"""Portkey's open-source AI gateway as a peer in :mod:`bench.gateway_overhead`.

Issue 41 measures mixroute against the fastest peer's plain proxy, and Portkey's Node
gateway is that peer. The bench installs the npm package (pinned ``@portkey-ai/gateway``,
the release the issue measured) into its own folder under ``~/.cache/mixroute/bench/`` on
first use (npm's registry is reachable where PyPI is) and starts its ``build/start-server.js``
headless on a free port, pinned like every other gateway.

Portkey forwards a request to the provider named by ``x-portkey-provider`` at the URL in
``x-portkey-custom-host``; a private address is accepted only when it is listed in
``TRUSTED_CUSTOM_HOSTS`` (its SSRF guard), so the bench lists the loopback upstream there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from bench.upstream import _wait_http

PORTKEY_VERSION = "1.15.2"


def portkey_dir() -> Path | None:
    """The folder holding the pinned package, installed on first use; ``None`` without npm."""
    home = Path.home() / ".cache" / "mixroute" / "bench" / f"portkey-{PORTKEY_VERSION}"
    server = home / "node_modules" / "@portkey-ai" / "gateway" / "build" / "start-server.js"
    if server.exists():
        return home
    if not (shutil.which("npm") and shutil.which("node")):
        return None
    print(f"installing @portkey-ai/gateway@{PORTKEY_VERSION} into {home} ...", file=sys.stderr)
    home.mkdir(parents=True, exist_ok=True)
    subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", str(home),
                    f"@portkey-ai/gateway@{PORTKEY_VERSION}"], check=True, stdout=subprocess.DEVNULL)
    return home if server.exists() else None


def start_portkey(upstream: str, tmp: Path, port: int, pin: Callable[[list[str]], list[str]]
                  ) -> tuple[subprocess.Popen, str, float, dict[str, str]]:
    """Start the gateway in front of ``upstream`` (an OpenAI-compatible ``.../v1`` URL).
    Returns the process, its chat URL, seconds to readiness and the headers every request
    needs (Portkey has no config file for a custom host: it travels per request)."""
    home = portkey_dir()
    if home is None:
        raise RuntimeError("Portkey needs node and npm on PATH (apt-get install -y nodejs npm)")
    server = home / "node_modules" / "@portkey-ai" / "gateway" / "build" / "start-server.js"
    env = {**os.environ, "TRUSTED_CUSTOM_HOSTS": "127.0.0.1,localhost", "NODE_ENV": "production"}
    t0 = time.monotonic()
    proc = subprocess.Popen(pin(["node", str(server), f"--port={port}", "--headless"]), env=env,
                            stdout=subprocess.DEVNULL, stderr=open(tmp / "portkey.log", "w"))
    # Portkey answers GET / with a plain "AI Gateway says hey!" once its server listens.
    _wait_http(f"http://127.0.0.1:{port}/", timeout=120)
    headers = {"x-portkey-provider": "openai", "x-portkey-custom-host": upstream}
    return proc, f"http://127.0.0.1:{port}/v1/chat/completions", time.monotonic() - t0, headers
