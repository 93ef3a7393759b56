"""Fixtures: the real gateway app served by uvicorn on 127.0.0.1 (a free port, a thread),
with a SQLite store in a temporary folder."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
import uvicorn

from gateway.app import create_app
from gateway.settings import Settings

FALLBACK_POLICY = """
version: 1
backends:
  - {name: broken-500, kind: fake, model: m-error-500, quality: 0.9, pricing: {input_per_1m: 0.1, output_per_1m: 0.1}}
  - {name: limited-429, kind: fake, model: m-error-429, quality: 0.9, pricing: {input_per_1m: 0.2, output_per_1m: 0.2}}
  - {name: dropper, kind: fake, model: m-drop-mid-stream, quality: 0.9, pricing: {input_per_1m: 0.1, output_per_1m: 0.1}}
  - {name: good, kind: fake, model: good-model, quality: 0.9, pricing: {input_per_1m: 1.0, output_per_1m: 2.0}}
  - {name: buggy, kind: fake, model: m-adapter-bug, quality: 0.9, pricing: {input_per_1m: 0.1, output_per_1m: 0.1}}
  - {name: slow, kind: fake, model: s-slow, quality: 0.9, options: {first_token_delay_s: 0.05, token_delay_s: 0.2}}
  - {name: short, kind: fake, model: m-error-context, quality: 0.9, context_tokens: 4096, pricing: {input_per_1m: 0.1, output_per_1m: 0.1}}
  - {name: short-too, kind: fake, model: m2-error-context, quality: 0.9, context_tokens: 4096, pricing: {input_per_1m: 0.1, output_per_1m: 0.1}}
  - {name: window-unknown, kind: fake, model: m3-error-context, quality: 0.9, pricing: {input_per_1m: 0.1, output_per_1m: 0.1}}
  - {name: shorter, kind: fake, model: m4-error-context, quality: 0.9, context_tokens: 2048, pricing: {input_per_1m: 0.1, output_per_1m: 0.1}}
  - {name: big-window, kind: fake, model: big-model, quality: 0.9, context_tokens: 128000, pricing: {input_per_1m: 0.5, output_per_1m: 0.5}}
routes:
  - {name: auto, backends: [broken-500, limited-429, good], quality_bar: {target: 0.95}}
  - {name: all-broken, backends: [broken-500, limited-429], quality_bar: {target: 0.95}}
  - {name: drop, backends: [dropper, good], quality_bar: {target: 0.95}}
  - {name: bug, backends: [buggy, good], quality_bar: {target: 0.95}}
  - {name: only-bug, backends: [buggy], quality_bar: {target: 0.95}}
  - {name: long, backends: [short, good], quality_bar: {target: 0.95}}
  - {name: only-short, backends: [short], quality_bar: {target: 0.95}}
  - {name: long-skip, backends: [short, short-too, good], quality_bar: {target: 0.95}}
  - {name: only-shorts, backends: [short, short-too, window-unknown], quality_bar: {target: 0.95}}
  - {name: skips-past-max-attempts, backends: [short, short-too, shorter, big-window], quality_bar: {target: 0.95}}
"""


@dataclass
class Gateway:
    url: str
    settings: Settings
    server: uvicorn.Server
    thread: threading.Thread

    @property
    def v1(self) -> str:
        return self.url + "/v1"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def start_gateway(tmp: Path, policy_text: str | None = None, prepare=None, ready_status: int = 200,
                  **overrides) -> Gateway:
    """Serve ``create_app`` on a free loopback port until :meth:`Gateway.stop`.

    Args:
        prepare: called with the app before it serves (e.g. to swap in a test tracer).
        ready_status: the ``/readyz`` status that means started (503 for a gateway that
            starts but is not ready: its key store never answered).

    Raises:
        RuntimeError: not ready within 20 s.
    """
    policy_path = None
    if policy_text is not None:
        policy_path = tmp / "policy.yaml"
        policy_path.write_text(policy_text)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    # The real port: the default journal's name has it, so gateways sharing a database get their own.
    overrides = {"policy_watch": False, "database_url": f"sqlite:///{tmp}/mixroute.db", "classifier": "off",
                 "port": port, "adapters_dir": tmp / "adapters", **overrides}
    settings = Settings(**{"policy_path": policy_path, **overrides})
    app = create_app(settings)
    if prepare is not None:
        prepare(app)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=2,
                                           timeout_keep_alive=settings.keep_alive_s))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            ready = httpx.get(url + "/readyz", timeout=1)
            if ready.status_code == ready_status and (ready_status == 200 or ready.json()["status"] != "starting"):
                return Gateway(url, settings, server, thread)
        except httpx.HTTPError:
            pass
        if not thread.is_alive():
            break
        time.sleep(0.05)
    server.should_exit = True
    raise RuntimeError("gateway did not become ready")


def wait_row(database_url: str, table: str, request_id: str, timeout: float = 5.0) -> dict:
    """The row of ``table`` for ``request_id``, polling until the store's writer has flushed it.

    Raises:
        AssertionError: no row within ``timeout`` seconds.
    """
    engine = sa.create_engine(database_url)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            with engine.connect() as conn:
                row = conn.execute(sa.text(f"SELECT * FROM {table} WHERE request_id = :r"),
                                   {"r": request_id}).mappings().first()
            if row:
                return dict(row)
            time.sleep(0.05)
    finally:
        engine.dispose()
    raise AssertionError(f"no {table} row for {request_id}")


@pytest.fixture(scope="module")
def demo_gateway(tmp_path_factory) -> Iterator[Gateway]:
    gw = start_gateway(tmp_path_factory.mktemp("demo"))
    yield gw
    gw.stop()


@pytest.fixture(scope="module")
def fallback_gateway(tmp_path_factory) -> Iterator[Gateway]:
    gw = start_gateway(tmp_path_factory.mktemp("fallback"), FALLBACK_POLICY)
    yield gw
    gw.stop()


@pytest.fixture(scope="module")
def upstream():
    """A fake OpenAI-compatible upstream (:mod:`tests.backends.fake_upstream`) for the module."""
    from tests.backends.fake_upstream import serve_in_thread

    server = serve_in_thread()
    yield server
    server.stop()


def start_pool_gateway(tmp: Path, upstream, model: str = "m") -> Gateway:
    """A gateway whose one route ``auto`` is a vLLM pool of one replica, ``upstream`` (no
    metrics scrape), serving ``model`` (the fake upstream picks its behaviour by the name)."""
    policy = f"""version: 1
backends:
  - {{name: pool, kind: vllm, model: {model}, endpoints: ["{upstream.v1()}"], options: {{metrics_interval_s: 0}}}}
routes:
  - {{name: auto, backends: [pool]}}
"""
    return start_gateway(tmp, policy)
