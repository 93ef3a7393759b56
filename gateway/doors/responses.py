"""The OpenAI Responses door: ``POST /v1/responses``.

A Responses request becomes a Chat Completions body (:mod:`gateway.doors.responses_input`)
that the shared pipeline routes like any chat request; the chat answer comes back as a
``response`` object (:mod:`gateway.doors.responses_shapes`) or as the Responses event
stream (:mod:`gateway.doors.responses_stream`). With ``store`` on (the default) the door
keeps the response's input and output items (:mod:`gateway.store.responses`), so that a
later request can continue it with ``previous_response_id``: its conversation is the
stored chain's items followed by its own input (the chain's ``instructions`` are not
carried over, as in OpenAI's API).
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone

from sqlalchemy.exc import SQLAlchemyError

from backends.response import Answer
from gateway.doors.base import Door, DoorCall, DoorContext, Rendered, StreamEncoder
from gateway.doors.images import refuse_images
from gateway.doors.responses_input import ParsedRequest, responses_param, translate
from gateway.doors.responses_shapes import new_id, output_items, response_object, usage
from gateway.doors.responses_stream import ResponsesEncoder
from gateway.schemas import ChatCompletionRequest, validate
from gateway.store.responses import ResponseRow, ResponseStore, response_store
from router.errors import InvalidRequest, MixrouteError

log = logging.getLogger("mixroute.gateway")


class ResponseNotFound(InvalidRequest):
    """A response id that is not the caller's: unknown, another tenant's, expired or
    deleted (one answer for all, so that ids of other tenants cannot be probed)."""

    status = 404
    code = "not_found"


class PreviousResponseNotFound(ResponseNotFound):
    code = "previous_response_not_found"


class StoreUnavailable(MixrouteError):
    """The store could not be read for a stored response."""

    status = 503
    code = "store_unavailable"


def stored_responses(ctx_store, settings) -> ResponseStore:
    """The response store of the app's store (:func:`gateway.store.responses.response_store`)."""
    return response_store(ctx_store, settings.responses_retention_s)


def _first_image(items: list[dict]) -> str | None:
    for i, item in enumerate(items):
        content = item.get("content") if item.get("type", "message") == "message" else None
        for j, part in enumerate(content if isinstance(content, list) else ()):
            if part.get("type") == "input_image":
                return f"input.{i}.content.{j}"
    return None


def _check_chat_rules(parsed: ParsedRequest) -> None:
    """Hold the canonical body to the chat rules here, where a breach can still be named by
    the client's own field (``max_output_tokens``, ``input.2.content.0.text``) rather than
    the chat body's (``max_completion_tokens``, ``messages.3...``).

    Raises:
        InvalidRequest: the first breach, ``param`` a Responses field.
    """
    try:
        validate(ChatCompletionRequest, parsed.body)
    except InvalidRequest as exc:
        if exc.param:
            own = responses_param(exc.param, parsed)
            message = str(exc.message)
            if message.startswith(exc.param + ":"):
                message = own + message[len(exc.param):]
            raise type(exc)(message, param=own, code=exc.code) from None
        raise


class ResponsesDoor(Door):
    """``POST /v1/responses``."""

    name = "responses"

    async def parse(self, raw: dict, ctx: DoorContext) -> DoorCall:
        history: list[dict] = []
        previous = raw.get("previous_response_id")
        if previous is not None:
            if not isinstance(previous, str):
                raise InvalidRequest("previous_response_id: must be a string", param="previous_response_id",
                                     code="invalid_value")
            history = await self._chain(previous, ctx)
        store = raw.get("store", True)
        if not isinstance(store, bool):
            raise InvalidRequest("store: must be a boolean", param="store", code="invalid_value")
        parsed = translate(raw, history)
        _check_chat_rules(parsed)
        refuse_images(_first_image(parsed.input_items), raw.get("model"), ctx.runtime.loaded.policy)
        stream = raw.get("stream") is True
        if stream:
            parsed.body["stream"] = True
        response_id = new_id("resp")
        # The session follows the chain: the previous response's session goes on, and this
        # response leaves a link for the next (gateway.sessions).
        return DoorCall(endpoint="chat", body=parsed.body, stream=stream, extra={
            "response_id": response_id, "echo": parsed.echo, "input_items": parsed.input_items, "store": store,
            "tenant": ctx.principal.tenant}, session_follows=previous, session_answer_id=response_id if store else None)

    @staticmethod
    async def _chain(previous: str, ctx: DoorContext) -> list[dict]:
        try:
            items = await stored_responses(ctx.store, ctx.settings).chain(previous, ctx.principal.tenant)
        except SQLAlchemyError as exc:
            log.error("responses: the store could not be read for previous_response_id (%s)", type(exc).__name__)
            raise StoreUnavailable("The stored responses cannot be read now; retry later",
                                   param="previous_response_id") from None
        if items is None:
            raise PreviousResponseNotFound(f"Previous response with id '{previous}' not found.",
                                           param="previous_response_id")
        return items

    def render(self, response: dict, call: DoorCall, done: Rendered) -> dict:
        call.extra["request_id"] = done.request_id
        answer = Answer.from_chat(response, call.report)
        # The cost goes in the x-mixroute-cost-usd header, as on the chat door.
        return response_object(call.extra["response_id"], call.extra["echo"], answer.model or done.model,
                               output_items(answer), finish_reason=answer.finish_reason, usage_=usage(answer.usage))

    def encoder(self, call: DoorCall, request_id: str, backend: str, model: str) -> StreamEncoder:
        call.extra["request_id"] = request_id
        return ResponsesEncoder(call.extra["response_id"], call.extra["echo"], model, call.report)

    async def after(self, call: DoorCall, rendered: dict, ctx: DoorContext) -> None:
        """Keep the response (``store`` on), committed before the client reads its end."""
        if not call.extra.get("store") or not rendered.get("id"):
            return
        row = ResponseRow(id=rendered["id"], tenant=call.extra["tenant"], request_id=call.extra.get("request_id"),
                          previous_response_id=call.extra["echo"].get("previous_response_id"),
                          input_items=call.extra["input_items"], output_items=rendered.get("output") or [],
                          body=rendered, created_at=datetime.now(timezone.utc))
        try:
            await stored_responses(ctx.store, ctx.settings).save(row)
        except (SQLAlchemyError, RuntimeError) as exc:
            # The answer itself still goes out: losing it would be worse than a later
            # previous_response_id that is not found.
            log.error("responses: %s not stored, previous_response_id will not find it (%s)", rendered["id"],
                      type(exc).__name__)


RESPONSES = ResponsesDoor()
