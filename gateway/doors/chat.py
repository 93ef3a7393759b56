"""The OpenAI Chat Completions and legacy Completions doors: their bodies are the canonical
request already, so parsing and rendering are the identity; streams are relayed chunk for
chunk, with the final usage chunk (``usage.cost_usd`` added) only when the client asked for
it with ``stream_options.include_usage``."""

from __future__ import annotations

from backends.errors import BackendError
from gateway.doors.base import Door, DoorCall, DoorContext, Rendered, StreamEncoder, sse

DONE = b"data: [DONE]\n\n"


class ChatEncoder(StreamEncoder):
    def __init__(self, wants_usage: bool):
        self.wants_usage = wants_usage

    def chunk(self, chunk: dict) -> bytes:
        if not self.wants_usage and "usage" in chunk:
            chunk = {k: v for k, v in chunk.items() if k != "usage"}
        return sse(chunk)

    def usage(self, chunk: dict, usage: dict) -> bytes:
        return sse({**chunk, "usage": usage}) if self.wants_usage else b""

    def done(self) -> bytes:
        return DONE

    def error(self, exc: BackendError) -> bytes:
        # OpenAI-style error event, then [DONE] so that SDKs stop reading.
        return sse(exc.to_envelope()) + DONE


class ChatDoor(Door):
    """``POST /v1/chat/completions`` (``name = "chat"``) or ``POST /v1/completions``."""

    def __init__(self, endpoint: str = "chat"):
        self.name = endpoint
        self.endpoint = endpoint

    async def parse(self, raw: dict, ctx: DoorContext) -> DoorCall:
        return DoorCall(endpoint=self.endpoint, body=raw, stream=bool(raw.get("stream")))

    def render(self, response: dict, call: DoorCall, done: Rendered) -> dict:
        return response

    def encoder(self, call: DoorCall, request_id: str, backend: str, model: str) -> StreamEncoder:
        return ChatEncoder(bool((call.body.get("stream_options") or {}).get("include_usage")))


CHAT = ChatDoor("chat")
COMPLETIONS = ChatDoor("completions")
