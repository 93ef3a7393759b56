"""Slow and large bodies are bounded, against a real uvicorn server with ``mixroute serve``'s
options, driven with raw sockets: a half-sent body gets 408 and its connection is closed;
bodies in flight beyond their byte budget get 503 while a small request still passes; the
connections held are capped; each bound logs one line, not one per refused request."""

from __future__ import annotations

import logging
import socket
import threading
import time

import httpx
import orjson
import pytest
import uvicorn

import gateway.body_guard as body_guard
from gateway.app import create_app
from gateway.serve import server_options
from gateway.settings import Settings

CHAT = "/v1/chat/completions"


@pytest.fixture(autouse=True)
def fresh_bound_log(monkeypatch):
    monkeypatch.setattr(body_guard, "BOUND_LOG", body_guard.BoundLog())


class Server:
    def __init__(self, tmp_path, **overrides) -> None:
        settings = Settings(database_url=f"sqlite:///{tmp_path}/m.db", classifier="off", policy_watch=False,
                            **overrides)
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        options = {**server_options(settings), "log_level": "warning"}
        self.server = uvicorn.Server(uvicorn.Config(create_app(settings), **options))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/readyz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError("gateway did not start")

    def connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=10)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def _head(length: int, path: str = CHAT) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n").encode()


def _response(sock: socket.socket, timeout: float) -> tuple[int, dict, bytes]:
    """Status, headers and body of one response read from ``sock`` (``(0, {}, b"")`` if none came)."""
    sock.settimeout(timeout)
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                return 0, {}, b""
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        while len(body) < int(headers.get("content-length", 0)):
            body += sock.recv(65536)
        return int(lines[0].split()[1]), headers, body
    except (TimeoutError, socket.timeout):
        return 0, {}, b""


def _closed(sock: socket.socket, timeout: float = 3.0) -> bool:
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except (TimeoutError, socket.timeout):
        return False
    except ConnectionResetError:
        return True


def _bound_lines(caplog, bound_text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if bound_text in r.getMessage()]


def test_a_half_sent_body_gets_408_and_its_connection_closes(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="mixroute.gateway")
    gw = Server(tmp_path, body_read_timeout_s=1.0)
    try:
        socks = [gw.connect() for _ in range(3)]
        started = time.monotonic()
        for s in socks:
            s.sendall(_head(1000) + b'{"messages": [')
        for _ in range(3):  # keep trickling: bytes that arrive do not extend the deadline
            time.sleep(0.3)
            for s in socks:
                s.sendall(b" ")
        for s in socks:
            status, headers, body = _response(s, timeout=5)
            assert status == 408, (status, body)
            assert orjson.loads(body)["error"]["code"] == "request_timeout"
            assert headers.get("connection") == "close"
            assert _closed(s)
            s.close()
        assert time.monotonic() - started < 4
        assert len(_bound_lines(caplog, "MIXROUTE_BODY_READ_TIMEOUT_S")) == 1  # three refused, one line
        # A whole body in time is served as before, on a connection that stays open.
        with httpx.Client() as client:
            for _ in range(2):
                ok = client.post(gw.url + CHAT, json={"messages": [{"role": "user", "content": "hi"}]})
                assert ok.status_code == 200 and ok.headers.get("connection") != "close"
    finally:
        gw.stop()


def test_bodies_in_flight_beyond_the_budget_get_503_and_a_small_request_passes(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="mixroute.gateway")
    budget = 1 << 20
    gw = Server(tmp_path, max_body_bytes_in_flight=budget, body_read_timeout_s=20)
    try:
        big = gw.connect()
        big.sendall(_head(900_000) + b" " * 700_000)  # held, not complete
        time.sleep(0.3)
        refused = []
        for _ in range(3):
            s = gw.connect()
            s.sendall(_head(500_000) + b" " * 400_000)
            refused.append(s)
        for s in refused:
            status, headers, body = _response(s, timeout=5)
            assert status == 503, (status, body)
            assert orjson.loads(body)["error"]["code"] == "server_busy"
            assert headers.get("retry-after") == "1" and headers.get("connection") == "close"
            s.close()
        small = httpx.post(gw.url + CHAT, json={"messages": [{"role": "user", "content": "hi"}]}, timeout=5)
        assert small.status_code == 200
        assert len(_bound_lines(caplog, "MIXROUTE_MAX_BODY_BYTES_IN_FLIGHT")) == 1
        # The held body completes and is answered (an invalid body: 400, not a bound).
        big.sendall(b" " * 200_000)
        status, _, body = _response(big, timeout=10)
        assert status == 400, body
        big.close()
    finally:
        gw.stop()


def test_connections_beyond_the_limit_are_refused_with_one_log_line(tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    gw = Server(tmp_path, max_connections=4)
    try:
        held = [gw.connect() for _ in range(4)]
        time.sleep(0.2)
        for _ in range(5):
            refused = httpx.get(gw.url + "/healthz", timeout=5)
            assert refused.status_code == 503
        assert len(_bound_lines(caplog, "MIXROUTE_MAX_CONNECTIONS=4")) == 1
        assert not _bound_lines(caplog, "Exceeded concurrency limit")
        for s in held:
            s.close()
        time.sleep(0.2)
        assert httpx.get(gw.url + "/healthz", timeout=5).status_code == 200
    finally:
        gw.stop()
