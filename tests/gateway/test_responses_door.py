"""``POST /v1/responses`` with the official openai SDK against the real app over HTTP (demo
policy, fake backends): plain, streamed, a function-tool round trip continued with
``previous_response_id``, ``responses.parse``, and the stored responses' GET and DELETE."""

from __future__ import annotations

import json

import openai
import pytest
from pydantic import BaseModel

from tests.gateway.conftest import wait_row

WEATHER = {"type": "function", "name": "get_weather", "description": "Weather for a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


@pytest.fixture
def client(demo_gateway):
    return openai.OpenAI(base_url=demo_gateway.v1, api_key="unused", max_retries=0)


def _rows(gw, request_id: str) -> tuple[dict, dict]:
    """The decision and outcome rows of ``request_id``; signals parsed."""
    decision = wait_row(gw.settings.database_url, "decisions", request_id)
    outcome = wait_row(gw.settings.database_url, "outcomes", request_id)
    if isinstance(decision["signals"], str):
        decision["signals"] = json.loads(decision["signals"])
    return decision, outcome


def test_create_plain(client, demo_gateway):
    raw = client.responses.with_raw_response.create(model="auto", input="What is the capital of France?",
                                                    instructions="Answer briefly.", metadata={"case": "plain"})
    resp = raw.parse()
    assert raw.headers["x-mixroute-route"] == "auto" and raw.headers["x-mixroute-backend"] == "gpt-4o-mini"
    assert float(raw.headers["x-mixroute-cost-usd"]) > 0
    assert resp.id.startswith("resp_") and resp.object == "response" and resp.status == "completed"
    assert resp.model == "gpt-4o-mini"  # the model that answered, not the route
    assert "capital of France" in resp.output_text
    message = resp.output[0]
    assert message.type == "message" and message.id.startswith("msg_") and message.role == "assistant"
    assert message.content[0].type == "output_text" and message.content[0].annotations == []
    assert resp.usage.input_tokens > 0 and resp.usage.output_tokens > 0
    assert resp.usage.total_tokens == resp.usage.input_tokens + resp.usage.output_tokens
    assert resp.usage.input_tokens_details.cached_tokens == 0
    assert resp.usage.output_tokens_details.reasoning_tokens == 0
    assert resp.instructions == "Answer briefly." and resp.metadata == {"case": "plain"}
    decision, outcome = _rows(demo_gateway, raw.headers["x-mixroute-request-id"])
    assert decision["signals"]["door"] == "responses" and decision["chosen"] == "gpt-4o-mini"
    assert outcome["status"] == "ok" and outcome["tokens_in"] == resp.usage.input_tokens


def test_create_streamed(client, demo_gateway):
    raw = client.responses.with_raw_response.create(model="auto", input="Stream me a short answer", stream=True)
    assert raw.headers["x-mixroute-backend"] == "gpt-4o-mini"
    events = list(raw.parse())
    kinds = [e.type for e in events]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed"]
    assert set(kinds[4:-4]) == {"response.output_text.delta"}
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    done = events[-1].response
    assert "Stream me a short answer" in text and done.output_text == text
    assert done.id == events[0].response.id and done.status == "completed" and done.model == "gpt-4o-mini"
    assert done.usage.input_tokens > 0 and done.usage.output_tokens > 0
    assert done.usage.total_tokens == done.usage.input_tokens + done.usage.output_tokens
    assert done.usage.model_extra["cost_usd"] > 0
    decision, outcome = _rows(demo_gateway, raw.headers["x-mixroute-request-id"])
    assert decision["signals"]["door"] == "responses"
    assert outcome["status"] == "ok" and outcome["streamed"] and outcome["tokens_out"] == done.usage.output_tokens
    # A streamed response is stored like any other.
    assert client.responses.retrieve(done.id).output_text == text


def test_function_tool_round_trip_with_previous_response_id(client, demo_gateway):
    first = client.responses.with_raw_response.create(model="auto", input="Weather in Paris?", tools=[WEATHER])
    call = first.parse().output[0]
    assert call.type == "function_call" and call.id.startswith("fc_") and call.name == "get_weather"
    assert json.loads(call.arguments) == {"city": "example"}
    raw = client.responses.with_raw_response.create(
        model="auto", previous_response_id=first.parse().id, tools=[WEATHER],
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21 C"}])
    second = raw.parse()
    assert second.previous_response_id == first.parse().id
    assert "Based on the tool result" in second.output_text and "sunny, 21 C" in second.output_text
    # The backend saw the whole conversation: the same one sent through chat gets the same answer.
    chat = client.chat.completions.create(model="auto", tools=[{"type": "function", "function": {
        k: WEATHER[k] for k in ("name", "description", "parameters")}}], messages=[
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": call.call_id, "type": "function", "function": {
            "name": "get_weather", "arguments": call.arguments}}]},
        {"role": "tool", "tool_call_id": call.call_id, "content": "sunny, 21 C"}])
    assert chat.choices[0].message.content == second.output_text
    for r in (first, raw):
        assert r.headers["x-mixroute-route"] == "auto" and r.headers["x-mixroute-backend"] == "gpt-4o-mini"
        decision, outcome = _rows(demo_gateway, r.headers["x-mixroute-request-id"])
        assert decision["signals"]["door"] == "responses" and outcome["status"] == "ok"
        assert outcome["cost_usd"] == pytest.approx(float(r.headers["x-mixroute-cost-usd"])) and outcome["cost_usd"] > 0


def test_function_call_streamed(client):
    events = list(client.responses.create(model="auto", input="Weather in Paris?", tools=[WEATHER], stream=True))
    kinds = [e.type for e in events]
    assert "response.function_call_arguments.delta" in kinds
    assert kinds[-3:] == ["response.function_call_arguments.done", "response.output_item.done", "response.completed"]
    item = events[-1].response.output[0]
    assert item.type == "function_call" and item.name == "get_weather"
    assert json.loads(item.arguments) == {"city": "example"}


class Capital(BaseModel):
    city: str
    population: int


def test_parse_with_a_pydantic_schema(client, demo_gateway):
    raw = client.responses.with_raw_response.parse(model="auto", input="The capital of France?", text_format=Capital)
    parsed = raw.parse()
    assert isinstance(parsed.output_parsed, Capital)
    assert parsed.output_parsed == Capital(city="example", population=1)
    assert parsed.text.format.type == "json_schema"
    decision, outcome = _rows(demo_gateway, raw.headers["x-mixroute-request-id"])
    assert decision["signals"]["door"] == "responses" and outcome["status"] == "ok"


def test_json_object_and_reasoning_effort(client):
    resp = client.responses.create(model="auto", input="Say hi as JSON", text={"format": {"type": "json_object"}},
                                   reasoning={"effort": "low"}, max_output_tokens=200, temperature=0.2)
    assert json.loads(resp.output_text)["model"] == "gpt-4o-mini"
    assert resp.reasoning.effort == "low" and resp.max_output_tokens == 200 and resp.temperature == 0.2


def test_max_output_tokens_cut_is_incomplete(client):
    resp = client.responses.create(model="auto", input="Tell me a long story about the sea", max_output_tokens=3)
    assert resp.status == "incomplete" and resp.incomplete_details.reason == "max_output_tokens"


def test_get_and_delete(client):
    created = client.responses.create(model="auto", input="Remember me")
    got = client.responses.retrieve(created.id)
    assert got.id == created.id and got.output_text == created.output_text and got.usage.total_tokens > 0
    deleted = client.responses.with_raw_response.delete(created.id)
    assert deleted.http_request.method == "DELETE"
    assert json.loads(deleted.text) == {"id": created.id, "object": "response", "deleted": True}
    with pytest.raises(openai.NotFoundError) as err:
        client.responses.retrieve(created.id)
    assert err.value.body["code"] == "not_found"
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError) as err:
        client.responses.create(model="auto", input="again", previous_response_id=created.id)
    assert err.value.body["param"] == "previous_response_id"


def test_store_false_keeps_nothing(client):
    created = client.responses.create(model="auto", input="Forget me", store=False)
    assert created.output_text
    with pytest.raises(openai.NotFoundError) as err:
        client.responses.create(model="auto", input="again", previous_response_id=created.id)
    assert err.value.body["param"] == "previous_response_id"
    assert err.value.body["code"] == "previous_response_not_found"
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(created.id)


def test_the_sdk_stream_helper(client):
    with client.responses.stream(model="auto", input="Stream through the helper") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert final.output_text == "".join(deltas) and "Stream through the helper" in final.output_text


def test_input_items_list_the_requests_own_items(client):
    first = client.responses.create(model="auto", input="Weather in Paris?", tools=[WEATHER], instructions="Be brief.")
    call = first.output[0]
    second = client.responses.create(model="auto", previous_response_id=first.id, tools=[WEATHER], input=[
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"},
        {"role": "user", "content": [{"type": "input_text", "text": "And tomorrow?"}]}])
    listed = client.responses.input_items.list(second.id, order="asc")
    # This request's own input, not the chain before it, nor the instructions.
    assert [i.type for i in listed.data] == ["function_call_output", "message"]
    assert listed.data[0].call_id == call.call_id and listed.data[0].output == "sunny"
    assert listed.data[1].content[0].text == "And tomorrow?" and listed.data[1].role == "user"
    assert all(i.id and i.status == "completed" for i in listed.data) and listed.has_more is False
    # A string input is one user message of one input_text part; ids are the same on every read.
    only = client.responses.input_items.list(first.id)
    assert [(i.type, i.role, i.content[0].type, i.content[0].text) for i in only.data] == [
        ("message", "user", "input_text", "Weather in Paris?")]
    assert client.responses.input_items.list(first.id).data[0].id == only.data[0].id
    # Newest first by default; paged with limit and after.
    newest = client.responses.input_items.list(second.id, limit=1)
    assert [i.type for i in newest.data] == ["message"] and newest.has_more and newest.first_id == newest.last_id
    rest = client.responses.input_items.list(second.id, limit=1, after=newest.last_id)
    assert [i.type for i in rest.data] == ["function_call_output"] and rest.has_more is False
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.input_items.list(second.id, limit=500)
    assert err.value.body["param"] == "limit"
    with pytest.raises(openai.NotFoundError):
        client.responses.input_items.list("resp_unknown")
