"""Fixtures: the real gateway over HTTP (``tests.gateway.conftest.start_gateway``) and a
variant that serves an already-built app, so a test can swap in an in-memory tracer."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import httpx
import uvicorn

from gateway.app import create_app
from gateway.settings import Settings
from tests.gateway.conftest import Gateway, start_gateway, wait_row  # noqa: F401  (re-exported)


def serve_app(tmp: Path, prepare, **overrides) -> Gateway:
    """Like ``start_gateway`` (demo policy), but calls ``prepare(app)`` before serving.

    Raises:
        RuntimeError: not ready within 20 s.
    """
    overrides = {"policy_watch": False, "database_url": f"sqlite:///{tmp}/mixroute.db", **overrides}
    settings = Settings(classifier="off", **overrides)
    app = create_app(settings)
    prepare(app)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=2))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and thread.is_alive():
        try:
            if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                return Gateway(url, settings, server, thread)
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    server.should_exit = True
    raise RuntimeError("gateway did not become ready")


def chat(gw: Gateway, content: str = "Say hi", *, model: str = "auto", key: str | None = None,
         stream: bool = False, **extra) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    body = {"model": model, "messages": [{"role": "user", "content": content}], "stream": stream, **extra}
    return httpx.post(gw.v1 + "/chat/completions", json=body, headers=headers, timeout=10)
