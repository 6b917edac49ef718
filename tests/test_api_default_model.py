"""The endpoint on the default model (Gemma 3 270M, a base model without a chat template):
the plain transcript with the tool schemas in its system part, a conversation that goes
on from everything before it, and a forced tool call through llama.cpp's grammar."""

from __future__ import annotations

import json

import pytest

from effctx_core.profiles import DEFAULT_PROFILE
from tests.helpers.api_server import running_api

SYSTEM = {"role": "system", "content": "You are a weather assistant. Answer in one short sentence."}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


@pytest.fixture(scope="module")
def client(default_model, tmp_path_factory):
    with running_api(default_model, DEFAULT_PROFILE, tmp_path_factory.mktemp("api-gemma")) as server:
        yield server.client()


def ask(client, messages, **options):
    return client.chat.completions.create(model="gpt-4o", messages=messages, tools=[WEATHER],
                                          **{"temperature": 0, "max_tokens": 12, **options})


def test_the_plain_transcript_holds_the_system_prompt_the_tools_and_each_message(client):
    response = ask(client, [SYSTEM, {"role": "user", "content": "Is it warm in Rome?"}])
    segments = response.model_extra["effctx"]["segments"]
    assert [s["label"] for s in segments if s["end"] > s["start"]][:2] == ["system", "tools"]
    assert [s["label"] for s in segments][-2:] == ["message 1 (user)", "generation prompt"]


def test_a_second_turn_computes_only_its_new_message(client):
    messages = [SYSTEM, {"role": "user", "content": "Is it raining in Oslo?"}]
    first = ask(client, messages)
    reply = first.choices[0].message.model_dump(exclude_none=True)
    second = ask(client, messages + [reply, {"role": "user", "content": "And in Bergen?"}])
    held = first.usage.prompt_tokens + first.usage.completion_tokens
    assert second.usage.prompt_tokens_details.cached_tokens == held
    assert second.model_extra["effctx"]["divergence"]["kind"] == "appended"


def test_a_forced_tool_call_names_the_tool_with_json_arguments(client):
    response = ask(client, [SYSTEM, {"role": "user", "content": "Weather in Paris?"}], max_tokens=40,
                   tool_choice={"type": "function", "function": {"name": "get_weather"}})
    call = response.choices[0].message.tool_calls[0]
    assert (call.function.name, response.choices[0].finish_reason) == ("get_weather", "tool_calls")
    assert set(json.loads(call.function.arguments)) == {"city"}
