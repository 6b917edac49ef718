"""Endpoint traffic for the console's requests screen: requests that leave one of each
thing the screen shows in a trace, sent with the `openai` SDK to a real endpoint
(tests/helpers/api_server.py), and the trace with its clock pinned for SVG baselines."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import openai

from effctx_core.events.reader import Trace
from effctx_core.events.trace import RequestQueued, RequestRouted, RequestServed, SessionOpened
from effctx_core.profiles import Profile
from tests.helpers.api_server import CHATML_TOKENS, HERMES_CHATML, running_api
from tests.helpers.tiny_gguf import write_tiny_llama_gguf

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
CLOCK = {"type": "function", "function": {
    "name": "get_time", "description": "The time in a time zone",
    "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}}}
SYSTEM = "You are a travel agent. Today is 2026-12-05 17:03:22. Keep answers short."
# The time the prompt says, as the pinned trace's clock: 2026-12-05 17:03:22 UTC.
STARTED = 1796490202.0


def _system(text: str) -> dict:
    return {"role": "system", "content": text}


def _user(text: str) -> dict:
    return {"role": "user", "content": text}


def send_traffic(client: openai.OpenAI) -> None:
    """Six requests, one after the other: a first one, its appended second turn, the same
    conversation with one word of its system prompt changed (travel → tour), then its
    timestamp (17:03:22 → 17:04:51), then its tool list reordered; then a second conversation."""

    def chat(messages: list[dict], tools: list[dict] | None = None) -> dict:
        response = client.chat.completions.create(model="any", messages=messages, temperature=0, max_tokens=8,
                                                  **({"tools": tools} if tools else {}))
        messages.append(response.choices[0].message.model_dump(exclude_none=True))
        return response.model_extra["effctx"]

    tools = [WEATHER, CLOCK]
    messages = [_system(SYSTEM), _user("Plan a trip to Rome")]
    chat(messages, tools)
    messages.append(_user("And Paris?"))
    chat(messages, tools)
    messages += [_user("And Rome again?")]
    messages[0] = _system(SYSTEM.replace("travel", "tour"))
    chat(messages, tools)
    messages += [_user("Which day is it?")]
    messages[0] = _system(SYSTEM.replace("travel", "tour").replace("17:03:22", "17:04:51"))
    chat(messages, tools)
    messages += [_user("Weather there?")]
    chat(messages, [CLOCK, WEATHER])
    chat([_system("You fix bugs."), _user("Fix the loop")])


def record_traffic(folder: Path) -> Path:
    """Send the traffic to an endpoint over the tiny ChatML model; the trace it wrote."""
    model = write_tiny_llama_gguf(folder / "tiny-chatml.gguf", chat_template=HERMES_CHATML,
                                  special_tokens=CHATML_TOKENS, eot_token="<|im_end|>")
    trace = folder / "api.jsonl"
    with running_api(model, Profile(name="api-test", n_ctx=1024), folder / "state", trace=trace) as api:
        send_traffic(api.client())
    return trace


def pinned(trace: Trace) -> Trace:
    """`trace` with what differs between two recordings of the same traffic fixed: the
    clock (the start, every event's time), each request's random id and its measured
    times and rates (prefill at 2,000 tok/s, decode at 100). What the requests did, their
    tokens, routes and divergences, is as recorded."""
    ids: dict[str, str] = {}
    events = []
    for i, event in enumerate(trace.events):
        event = replace(event, t_ms=250.0 * i)
        if isinstance(event, SessionOpened):
            event = replace(event, started=STARTED)
        if isinstance(event, (RequestQueued, RequestRouted, RequestServed)) and event.request:
            event = replace(event, request=ids.setdefault(event.request, f"chatcmpl-{len(ids) + 1}"))
        if isinstance(event, RequestServed):
            prefill_ms = event.computed / 2.0
            event = replace(event, prefill_ms=prefill_ms, prefill_tps=2000.0, ttft_ms=prefill_ms + 5.0,
                            decode_tps=100.0, queue_ms=1.0)
        events.append(event)
    return replace(trace, events=tuple(events))
