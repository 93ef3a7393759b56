"""The ``openai-agents`` SDK against the real gateway over HTTP: an agent with one function
tool, run to completion by ``Runner.run``, once through its Responses model and once through
its Chat Completions model (tracing off: nothing leaves the machine)."""

from __future__ import annotations

import pytest
from agents import Agent, OpenAIChatCompletionsModel, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

calls: list[str] = []


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    calls.append(city)
    return f"sunny and 21 C in {city}"


@pytest.fixture(autouse=True)
def _no_tracing():
    set_tracing_disabled(True)
    calls.clear()


@pytest.mark.parametrize("model_class", [OpenAIResponsesModel, OpenAIChatCompletionsModel])
async def test_agent_with_a_function_tool_runs_to_completion(demo_gateway, model_class):
    client = AsyncOpenAI(base_url=demo_gateway.v1, api_key="unused", max_retries=0)
    agent = Agent(name="weather", instructions="Answer with the tool's help.", tools=[get_weather],
                  model=model_class(model="auto", openai_client=client))
    result = await Runner.run(agent, "What is the weather in Paris?", max_turns=4)
    assert calls == ["example"]  # the fake backend fills the tool's arguments from its schema
    assert "Based on the tool result" in result.final_output and "sunny and 21 C" in result.final_output
    responses = result.raw_responses
    assert len(responses) == 2 and responses[-1].usage.output_tokens > 0
    if model_class is OpenAIResponsesModel:  # served by /v1/responses, not by chat
        assert all(r.response_id.startswith("resp_") for r in responses)
    await client.close()


async def test_agent_streamed_through_the_responses_model(demo_gateway):
    client = AsyncOpenAI(base_url=demo_gateway.v1, api_key="unused", max_retries=0)
    agent = Agent(name="weather", instructions="Answer with the tool's help.", tools=[get_weather],
                  model=OpenAIResponsesModel(model="auto", openai_client=client))
    result = Runner.run_streamed(agent, "What is the weather in Rome?", max_turns=4)
    kinds = [event.type async for event in result.stream_events()]
    assert "raw_response_event" in kinds and calls == ["example"]
    assert "Based on the tool result" in result.final_output
    await client.close()
