"""Fixtures: the real gateway over HTTP (``tests.gateway.conftest.start_gateway``) and a
variant that serves an already-built app, so a test can swap in an in-memory tracer."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.gateway.conftest import Gateway, start_gateway, wait_row  # noqa: F401  (re-exported)


def serve_app(tmp: Path, prepare, **overrides) -> Gateway:
    """Like ``start_gateway`` (demo policy), but calls ``prepare(app)`` before serving.

    Raises:
        RuntimeError: not ready within 20 s.
    """
    return start_gateway(tmp, None, prepare=prepare, **overrides)


def chat(gw: Gateway, content: str = "Say hi", *, model: str = "auto", key: str | None = None,
         stream: bool = False, **extra) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    body = {"model": model, "messages": [{"role": "user", "content": content}], "stream": stream, **extra}
    return httpx.post(gw.v1 + "/chat/completions", json=body, headers=headers, timeout=10)
