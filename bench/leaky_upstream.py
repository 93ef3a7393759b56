"""A failing OpenAI-compatible upstream that echoes the credentials it was sent, over real
HTTP: for the tests and fault scenarios that check a gateway never shows them to a client.

Every ``POST .../chat/completions`` or ``.../completions`` fails, and its error message
repeats the request's ``Authorization`` header, the ``user:password`` it decodes to, and the
request's URL with that user info (as a proxy or a debugging upstream might):

- not streamed: HTTP 500 with the OpenAI error envelope;
- streamed: one chunk of text, then an error event ``data: {"error": {...}}``, then the
  connection closes (a failure after the first byte).

Start it with :func:`serve_in_thread`; :attr:`LeakyUpstream.authorizations` lists the
``Authorization`` headers it received.
"""

from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def echo(handler: BaseHTTPRequestHandler) -> str:
    """The leaky error message for one request."""
    auth = handler.headers.get("Authorization", "")
    pair = ""
    if auth.lower().startswith("basic "):
        pair = base64.b64decode(auth.split(None, 1)[1]).decode("utf-8", "replace")
    host = handler.headers.get("Host", "")
    return (f"upstream refused the request: Authorization: {auth}; credentials {pair}; "
            f"url http://{pair}@{host}{handler.path}")


def _chunk(model: str, content: str) -> dict:
    return {"id": "chatcmpl-leaky", "object": "chat.completion.chunk", "created": 0, "model": model,
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": content}, "finish_reason": None}]}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *_args) -> None:  # quiet
        pass

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        self.server.authorizations.append(self.headers.get("Authorization", ""))
        error = {"error": {"message": echo(self), "type": "server_error", "param": None, "code": None}}
        if not body.get("stream"):
            data = json.dumps(error).encode()
            self.send_response(500)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        for event in (_chunk(str(body.get("model")), "Hello"), error):
            self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
            self.wfile.flush()
        self.close_connection = True


class LeakyUpstream:
    """The running server: :meth:`v1` gives its base URL with user info, :meth:`stop` ends it."""

    def __init__(self) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.server.daemon_threads = True
        self.server.authorizations = []
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def authorizations(self) -> list[str]:
        return self.server.authorizations

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    def v1(self, user: str, password: str) -> str:
        """The base URL ``http://user:password@127.0.0.1:PORT/v1``."""
        return f"http://{user}:{password}@127.0.0.1:{self.port}/v1"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def serve_in_thread() -> LeakyUpstream:
    """Start a :class:`LeakyUpstream` on a free loopback port."""
    upstream = LeakyUpstream()
    upstream.thread.start()
    return upstream
