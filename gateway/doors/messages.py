"""The Anthropic Messages door: ``POST /v1/messages`` and ``POST /v1/messages/count_tokens``.

A Messages request is checked and becomes a Chat Completions body
(:mod:`gateway.doors.messages_input`) that the shared pipeline routes like any chat request;
the chat answer comes back as a ``message`` object (litellm's
``translate_openai_response_to_anthropic``) or as Anthropic's event stream
(:mod:`gateway.doors.messages_stream`). Errors use Anthropic's envelope
``{"type": "error", "error": {"type", "message"}}``. ``metadata.user_id`` is the request's
explicit session (``DoorCall.session_hint``, :func:`gateway.sessions.session_hint`) and,
as litellm translates it, the chat ``user`` that backends receive.
"""

from __future__ import annotations

from backends.openai_shapes import prompt_text, prompt_tokens
from backends.response import Answer
from gateway.doors.base import Door, DoorCall, DoorContext, Rendered, StreamEncoder
from gateway.doors.messages_input import check, check_images, from_chat, to_chat
from gateway.doors.messages_shapes import CountTokensRequest
from gateway.doors.messages_stream import (MessagesEncoder, anthropic_usage, error_envelope, new_message_id,
                                           stop_sequence)


class MessagesDoor(Door):
    """``POST /v1/messages``."""

    name = "messages"

    async def parse(self, raw: dict, ctx: DoorContext) -> DoorCall:
        check(raw)
        check_images(raw, ctx.runtime.loaded.policy)
        body, names = to_chat(raw)
        user_id = (raw.get("metadata") or {}).get("user_id")
        return DoorCall(endpoint="chat", body=body, stream=body.get("stream") is True,
                        extra={"message_id": new_message_id(), "tool_names": names},
                        session_hint=f"metadata.user_id:{user_id}" if user_id else None)

    def render(self, response: dict, call: DoorCall, done: Rendered) -> dict:
        # Content blocks are litellm's translation (signed thinking blocks, refusals and the
        # provider's own blocks of Anthropic-hosted backends); the rest comes from the answer.
        answer = Answer.from_chat(response, call.report)
        message = from_chat(response, call.extra.get("tool_names"))
        message["id"] = call.extra["message_id"]
        message["model"] = answer.model or done.model
        # Anthropic's usage fields only: the cost goes in the x-mixroute-cost-usd header, as on
        # the chat door (a stream, which has no header to spare, reports it in message_delta).
        message["usage"] = anthropic_usage(answer.usage)
        message.pop("stop_details", None)
        matched = stop_sequence(answer.finish_reason, answer.stop_reason, _stops(call))
        if matched is not None:
            message["stop_reason"], message["stop_sequence"] = "stop_sequence", matched
        # litellm leaves a thinking block's signature null when the backend sent reasoning
        # text without one (vLLM's reasoning parsers); Anthropic's schema wants a string.
        message["content"] = [{**b, "signature": b.get("signature") or ""} if b.get("type") == "thinking" else b
                              for b in message.get("content") or []]
        return message

    def encoder(self, call: DoorCall, request_id: str, backend: str, model: str) -> StreamEncoder:
        return MessagesEncoder(call.extra["message_id"], model, _stops(call), call.report, call.extra.get("tool_names"))

    def error_body(self, status: int, message: str, type_: str, code: str | None, param: str | None) -> dict:
        return error_envelope(status, message)


def _stops(call: DoorCall) -> list:
    stops = call.body.get("stop")
    return [stops] if isinstance(stops, str) else stops if isinstance(stops, list) else []


def count_tokens(raw: dict) -> dict:
    """``{"input_tokens": N}`` for a ``count_tokens`` body: the prompt tokens the router
    counts for the same request (:func:`backends.openai_shapes.prompt_tokens`, also what
    limits and expected costs use), on its canonical chat body.

    Raises:
        router.errors.InvalidRequest: the body is not a valid Messages request.
    """
    check(raw, CountTokensRequest)
    body, _ = to_chat({**raw, "max_tokens": 1})
    return {"input_tokens": prompt_tokens("chat", body, prompt_text("chat", body))}


MESSAGES = MessagesDoor()
