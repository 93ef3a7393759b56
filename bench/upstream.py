"""A fast fake OpenAI-compatible upstream: nginx (Debian's package) answering every
``POST /v1/chat/completions`` with one fixed JSON body, so upstream time is near zero and
what a benchmark measures is the gateway in front of it.

Raises :class:`RuntimeError` when nginx is not installed (``apt-get install nginx-light``).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import orjson

RESPONSE = {
    "id": "chatcmpl-bench", "object": "chat.completion", "created": 1700000000, "model": "bench-model",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello from the fixed upstream."},
                 "finish_reason": "stop", "logprobs": None}],
    "usage": {"prompt_tokens": 12, "completion_tokens": 8, "total_tokens": 20},
}

_CONF = """
worker_processes 1;
daemon off;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 8192; }}
http {{
  access_log off;
  client_body_temp_path {dir}/body; proxy_temp_path {dir}/proxy; fastcgi_temp_path {dir}/fcgi;
  uwsgi_temp_path {dir}/uwsgi; scgi_temp_path {dir}/scgi;
  keepalive_requests 10000000;
  server {{
    listen 127.0.0.1:{port};
    location /v1/ {{ default_type application/json; return 200 '{body}'; }}
  }}
}}
"""


class NginxUpstream:
    """Start/stop nginx on ``port`` (pinned to ``cpu`` with taskset when given)."""

    def __init__(self, port: int, cpu: int | None = None):
        if not shutil.which("nginx"):
            raise RuntimeError("nginx is not installed: apt-get install -y nginx-light")
        self.port = port
        self.cpu = cpu
        self.dir = Path(tempfile.mkdtemp(prefix="mixroute-bench-nginx-"))
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> "NginxUpstream":
        body = orjson.dumps(RESPONSE).decode().replace("'", "\\'")
        conf = self.dir / "nginx.conf"
        conf.write_text(_CONF.format(dir=self.dir, port=self.port, body=body))
        cmd = ["nginx", "-c", str(conf), "-p", str(self.dir)]
        if self.cpu is not None and shutil.which("taskset"):
            cmd = ["taskset", "-c", str(self.cpu), *cmd]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait_http(f"http://127.0.0.1:{self.port}/v1/models", method="POST")
        return self

    def stop(self) -> None:
        if self.proc:
            self.proc.terminate()
            self.proc.wait(timeout=10)


def _wait_http(url: str, timeout: float = 30.0, method: str = "GET") -> float:
    import httpx

    start = time.monotonic()
    while time.monotonic() - start < timeout:
        try:
            if httpx.request(method, url, timeout=1).status_code < 500:
                return time.monotonic() - start
        except httpx.HTTPError:
            pass
        time.sleep(0.02)
    raise RuntimeError(f"{url} did not answer within {timeout} s")
