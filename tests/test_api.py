"""`effctx api` driven with the real `openai` SDK: the OpenAI surface, effctx's account of
each request, conversations that resume from their own stored states, and every error as
the SDK's exception class. The tiny generated model with a Hermes-style ChatML template."""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx2
import jsonschema
import openai
import pytest

from effctx_core.api import server as api_server
from effctx_core.backends.openvino.settings import OpenVINOOptions
from effctx_core.contract import SessionSnapshot
from effctx_core.errors import SessionFatalError
from effctx_core.events.explain import FIRST_TURN, REQUEST_SHARED
from effctx_core.events.reader import read_trace
from effctx_core.events.timeline import Timeline
from effctx_core.events.trace import TurnFinished
from effctx_core.profiles import Profile
from tests.helpers.api_server import CHATML_TOKENS, HERMES_CHATML, running_api
from tests.helpers.engine_jobs import WAIT, Blocker
from tests.helpers.tiny_gguf import write_tiny_llama_gguf

pytestmark = pytest.mark.model

PROFILE = Profile(name="api-test", n_ctx=1024)
# The same model on the OpenVINO cell: its IR (converted once, into the data dir), sampled
# with llama.cpp's samplers from the IR's logits, states read from the infer request.
OPENVINO = Profile(name="api-test-ov", backend="openvino", n_ctx=1024, n_batch=64,
                   backend_options=OpenVINOOptions())
PAGED = Profile(name="api-test-paged", backend="openvino", n_ctx=1024, n_batch=64,
                backend_options=OpenVINOOptions(pipeline="paged"))
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}},
                   "required": ["city"]}}}
CLOCK = {"type": "function", "function": {
    "name": "get_time", "description": "The time in a time zone",
    "parameters": {"type": "object", "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]}},
                   "required": ["zone"]}}}
MODEL_NAME = "tiny-llama-test"  # the GGUF's general.name
GREEDY = {"temperature": 0, "max_tokens": 8}


@pytest.fixture(scope="module")
def tiny_chatml(tmp_path_factory):
    return write_tiny_llama_gguf(tmp_path_factory.mktemp("api-model") / "tiny-chatml.gguf",
                                 chat_template=HERMES_CHATML, special_tokens=CHATML_TOKENS, eot_token="<|im_end|>")


@pytest.fixture(scope="module", params=[PROFILE, OPENVINO], ids=["llama", "openvino"])
def api(request, tiny_chatml, tmp_path_factory):
    with running_api(tiny_chatml, request.param, tmp_path_factory.mktemp("api-state"), queue=2) as server:
        yield server


@pytest.fixture
def client(api):
    return api.client()


def system(text: str) -> dict:
    return {"role": "system", "content": text}


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def chat(client, messages, **options):
    return client.chat.completions.create(model="gpt-4o", messages=messages, **{**GREEDY, **options})


def reply_message(response) -> dict:
    return response.choices[0].message.model_dump(exclude_none=True)


def effctx(response) -> dict:
    return response.model_extra["effctx"]


def test_models_names_the_loaded_model(client):
    assert [m.id for m in client.models.list().data] == [MODEL_NAME]


def test_any_model_name_is_served_by_the_loaded_model(client):
    response = chat(client, [user("Which model answers?")])
    assert response.model == MODEL_NAME
    assert response.object == "chat.completion"


def test_a_reply_reports_usage_timings_and_a_new_conversation(client):
    response = chat(client, [system("You are a cold start."), user("First words")])
    usage, timings = response.usage, response.model_extra["timings"]
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    cached = usage.prompt_tokens_details.cached_tokens
    assert (timings["cache_n"], timings["prompt_n"]) == (cached, usage.prompt_tokens - cached)
    assert effctx(response)["reused"] == cached
    assert timings["predicted_n"] == usage.completion_tokens
    assert set(timings) == {"cache_n", "prompt_n", "prompt_ms", "prompt_per_token_ms", "prompt_per_second",
                            "predicted_n", "predicted_ms", "predicted_per_token_ms", "predicted_per_second"}
    assert effctx(response)["divergence"]["kind"] == "new_conversation"


def test_a_second_turn_reuses_the_first_turn_and_its_reply(client):
    messages = [system("You count sheep."), user("One sheep")]
    first = chat(client, messages)
    second = chat(client, messages + [reply_message(first), user("Two sheep")])
    held = first.usage.prompt_tokens + first.usage.completion_tokens
    assert second.usage.prompt_tokens_details.cached_tokens == held
    assert effctx(second)["route"]["kind"] == "resident"
    assert effctx(second)["divergence"]["kind"] == "appended"
    assert effctx(second)["conversation"] == effctx(first)["conversation"]


def test_a_stream_sends_the_same_text_as_a_plain_reply(client):
    messages = [system("Stream test."), user("Tell me")]
    plain = chat(client, messages)
    chunks = list(chat(client, messages, stream=True))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == plain.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == plain.choices[0].finish_reason
    assert all(c.choices for c in chunks)  # no usage chunk unless asked


def test_a_stream_ends_with_one_usage_chunk_only_when_asked(client):
    chunks = list(chat(client, [user("Usage please")], stream=True, stream_options={"include_usage": True}))
    assert [bool(c.choices) for c in chunks][-2:] == [True, False]
    assert sum(1 for c in chunks if not c.choices) == 1
    assert chunks[-1].usage.completion_tokens > 0


def test_a_raw_stream_is_server_sent_events_ending_with_done(api):
    body = {"model": "x", "messages": [user("Raw")], "stream": True, **GREEDY}
    with httpx2.stream("POST", f"{api.base_url}/chat/completions", json=body, timeout=WAIT) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        text = r.read().decode()
    events = text.split("\n\n")
    assert events[-1] == ""
    assert events[-2] == "data: [DONE]"
    assert all(e.startswith("data: ") for e in events[:-1])


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_a_forced_tool_call_is_a_valid_call(client, choice):
    response = chat(client, [user("Weather in Paris?")], tools=[CLOCK, WEATHER], tool_choice=choice,
                    max_tokens=80)
    calls = response.choices[0].message.tool_calls
    assert response.choices[0].finish_reason == "tool_calls"
    assert len(calls) == 1 and calls[0].id.startswith("call_")
    if choice != "required":
        assert calls[0].function.name == "get_weather"
    args = json.loads(calls[0].function.arguments)
    assert args in ({"city": "Paris"}, {"city": "Rome"}, {"zone": "UTC"}, {"zone": "CET"})


def test_a_streamed_forced_tool_call_arrives_as_a_delta_keyed_by_index(client):
    chunks = list(chat(client, [user("Weather in Rome?")], tools=[WEATHER], stream=True, max_tokens=80,
                       tool_choice={"type": "function", "function": {"name": "get_weather"}}))
    calls = [tc for c in chunks for tc in (c.choices[0].delta.tool_calls or [])]
    assert [(tc.index, tc.function.name) for tc in calls] == [(0, "get_weather")]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_a_tool_result_goes_on_from_the_call(client):
    messages = [user("Weather in Paris?")]
    call = chat(client, messages, tools=[WEATHER], max_tokens=80,
                tool_choice={"type": "function", "function": {"name": "get_weather"}})
    tool_call = call.choices[0].message.tool_calls[0]
    result = chat(client, messages + [reply_message(call), {"role": "tool", "tool_call_id": tool_call.id,
                                                            "content": "sunny, 21 C"}], tools=[WEATHER])
    assert result.usage.prompt_tokens_details.cached_tokens >= call.usage.prompt_tokens
    # The template writes the call back as its own JSON, not as the model wrote it.
    divergence = effctx(result)["divergence"]
    assert (divergence["kind"], divergence["segment"]["label"]) == ("rerendered", "message 1 (assistant)")


def test_a_json_schema_reply_follows_the_schema(client):
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"],
              "additionalProperties": False}
    response = chat(client, [user("Answer with JSON")], max_tokens=60,
                    response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": schema}})
    jsonschema.validate(json.loads(response.choices[0].message.content), schema)


def test_logprobs_come_with_each_token_and_their_alternatives(client):
    response = chat(client, [user("Probabilities")], logprobs=True, top_logprobs=2)
    entries = response.choices[0].logprobs.content
    assert len(entries) == response.usage.completion_tokens
    assert all(e.logprob <= 0 and len(e.top_logprobs) == 2 for e in entries)
    assert all(e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob for e in entries)


def test_two_interleaved_conversations_each_resume_from_their_own_state(client):
    # Long enough that restoring a state costs less than prefilling it again.
    a = [system("Agent A plans trips. " * 40), user("Plan Rome")]
    b = [system("Agent B fixes bugs. " * 40), user("Fix the loop")]
    a1, b1 = chat(client, a), chat(client, b)
    a2 = chat(client, a + [reply_message(a1), user("And Paris")])
    b2 = chat(client, b + [reply_message(b1), user("And the test")])
    for first, second in ((a1, a2), (b1, b2)):
        assert effctx(second)["route"]["kind"] == "restored"
        assert effctx(second)["route"]["node"] == effctx(first)["node"]
        assert second.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens
        assert effctx(second)["conversation"] == effctx(first)["conversation"]
    assert effctx(a2)["conversation"] != effctx(b2)["conversation"]


def _diverged(client, before: list, after: list, **options) -> dict:
    first = chat(client, before, **options)
    second = chat(client, after + [reply_message(first), user("Next")], **options)
    assert effctx(second)["conversation"] == effctx(first)["conversation"]
    return effctx(second)["divergence"]


def test_a_changed_system_prompt_is_named_with_the_text_on_both_sides(client):
    d = _diverged(client, [system("You speak French."), user("Bonjour")],
                  [system("You speak German."), user("Bonjour")])
    assert d["kind"] == "system_changed"
    assert d["segment"]["label"] == "system"
    assert "French" in d["sides"]["stored"] and "German" in d["sides"]["prompt"]


def test_a_changed_timestamp_is_named_as_a_date_change(client):
    d = _diverged(client, [system("Today is 2026-12-05 17:03:22."), user("What day?")],
                  [system("Today is 2026-12-05 17:04:51."), user("What day?")])
    assert d["kind"] == "date_changed"


def test_a_reordered_tool_list_is_named(client):
    first = chat(client, [user("Order matters")], tools=[WEATHER, CLOCK])
    second = chat(client, [user("Order matters"), reply_message(first), user("Next")], tools=[CLOCK, WEATHER])
    d = effctx(second)["divergence"]
    assert (d["kind"], d["detail"]) == ("tools_changed", "reordered: get_weather, get_time → get_time, get_weather")


def test_an_edited_earlier_message_is_named_with_its_index(client):
    d = _diverged(client, [system("Editing."), user("The cat sat on the mat")],
                  [system("Editing."), user("The dog sat on the mat")])
    assert d["kind"] == "history_edited"
    assert (d["segment"]["index"], d["segment"]["role"]) == (1, "user")


def test_the_queue_refuses_with_429_when_full(api, client):
    blocker = Blocker(api.service)
    waiting = [threading.Thread(target=chat, args=(api.client(), [user(f"wait {i}")])) for i in range(2)]
    try:
        for t in waiting:
            t.start()
        while api.service.status.queued < 2:
            threading.Event().wait(0.01)
        with pytest.raises(openai.RateLimitError) as refused:
            chat(client, [user("one too many")])
        assert refused.value.response.headers["retry-after"] == "1"
    finally:
        blocker.release.set()
        for t in waiting:
            t.join(WAIT)


def test_a_client_that_goes_away_mid_reply_cancels_it_and_the_next_request_is_served(api, client):
    finished: list = []
    unsubscribe = api.service.submit(lambda engine, token: engine.subscribe(
        lambda e: finished.append(e.result) if isinstance(e, TurnFinished) else None)).future.result(WAIT)
    try:
        body = {"model": "x", "messages": [user("Talk for long")], "stream": True, "temperature": 0,
                "max_tokens": 900}
        with httpx2.stream("POST", f"{api.base_url}/chat/completions", json=body, timeout=WAIT) as r:
            next(r.iter_lines())
        after = chat(client, [user("Still there?")])
    finally:
        unsubscribe()
    assert after.choices[0].finish_reason in ("stop", "length")
    assert finished[0].stop_reason == "cancelled" and finished[0].generated < 900


@pytest.mark.parametrize(("options", "param"), [
    ({"n": 2}, "n"),
    ({"frequency_penalty": 0.5}, "frequency_penalty"),
    ({"extra_body": {"mirostat": 2}}, "mirostat"),
    ({"top_logprobs": 2}, None),
])
def test_an_unsupported_field_is_refused_naming_it(client, options, param):
    with pytest.raises(openai.BadRequestError) as refused:
        chat(client, [user("Refuse me")], **options)
    assert refused.value.status_code == 400
    assert refused.value.param == param


def test_a_message_of_the_wrong_shape_is_refused_naming_its_field(client):
    with pytest.raises(openai.BadRequestError) as refused:
        chat(client, [{"role": "user", "content": 42}])
    assert refused.value.param == "messages.0.content"


def test_malformed_json_is_a_400(api):
    r = httpx2.post(f"{api.base_url}/chat/completions", content=b'{"messages": [', timeout=WAIT,
                    headers={"content-type": "application/json"})
    assert r.status_code == 400
    assert r.json()["error"]["type"] == "invalid_request_error"


def test_a_prompt_over_the_context_is_context_length_exceeded(client):
    with pytest.raises(openai.BadRequestError) as refused:
        chat(client, [user("word " * 1200)])
    assert refused.value.code == "context_length_exceeded"
    assert "1024" in refused.value.message


def test_a_body_over_the_limit_is_413(api):
    r = httpx2.post(f"{api.base_url}/chat/completions", content=b"x" * (9 * 1024 * 1024), timeout=WAIT,
                    headers={"content-type": "application/json"})
    assert r.status_code == 413


def test_a_body_sent_without_a_length_is_held_to_the_limit_too(api):
    chunks = (b"x" * (1024 * 1024) for _ in range(9))
    r = httpx2.post(f"{api.base_url}/chat/completions", content=chunks, timeout=WAIT,
                    headers={"content-type": "application/json"})
    assert (r.status_code, r.json()["error"]["code"]) == (413, "request_too_large")


def test_an_unknown_route_is_a_404_in_openai_shape(api):
    r = httpx2.get(f"{api.base_url}/embeddings", timeout=WAIT)
    assert (r.status_code, r.json()["error"]["type"]) == (404, "not_found_error")


def test_a_text_completion_streams_and_reports_usage(client):
    chunks = list(client.completions.create(model="x", prompt="Once upon", max_tokens=5, temperature=0,
                                            stream=True, stream_options={"include_usage": True}))
    plain = client.completions.create(model="x", prompt="Once upon", max_tokens=5, temperature=0)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == plain.choices[0].text
    assert chunks[-1].usage.completion_tokens == plain.usage.completion_tokens


def test_conversations_resume_from_their_states_after_a_restart(tiny_chatml, tmp_path):
    messages = [system("A restart test. " * 10), user("Before the restart")]
    with running_api(tiny_chatml, PROFILE, tmp_path) as first_run:
        first = chat(first_run.client(), messages)
    assert (effctx(first)["route"]["kind"], first.usage.prompt_tokens_details.cached_tokens) == ("cold", 0)
    with running_api(tiny_chatml, PROFILE, tmp_path) as second_run:
        second = chat(second_run.client(), messages + [reply_message(first), user("After it")])
    assert effctx(second)["route"]["kind"] == "restored"
    assert effctx(second)["conversation"] == effctx(first)["conversation"]
    assert second.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens


def test_a_wrong_api_key_is_refused_on_every_route(tiny_chatml, tmp_path):
    with running_api(tiny_chatml, PROFILE, tmp_path, api_key="sesame") as keyed:
        with pytest.raises(openai.AuthenticationError):
            keyed.client("wrong").models.list()
        assert httpx2.get(f"http://127.0.0.1:{keyed.port}/health", timeout=WAIT).status_code == 401
        assert [m.id for m in keyed.client("sesame").models.list().data] == [MODEL_NAME]


def test_a_cell_without_grammars_or_logprobs_refuses_them_naming_the_field(tiny_chatml, tmp_path):
    with running_api(tiny_chatml, PAGED, tmp_path) as paged:
        client = paged.client()
        with pytest.raises(openai.BadRequestError) as refused:
            chat(client, [user("JSON")], response_format={"type": "json_object"})
        assert refused.value.param == "response_format"
        with pytest.raises(openai.BadRequestError) as refused:
            chat(client, [user("Probabilities")], logprobs=True)
        assert refused.value.param == "logprobs"
        assert chat(client, [user("Plain text still works")]).choices[0].finish_reason in ("stop", "length")


def test_while_the_model_loads_requests_get_503_with_retry_after(tiny_chatml, tmp_path):
    gate = threading.Event()
    with running_api(tiny_chatml, PROFILE, tmp_path, load_gate=gate) as loading:
        health = httpx2.get(f"http://127.0.0.1:{loading.port}/health", timeout=WAIT)
        with pytest.raises(openai.InternalServerError) as refused:
            chat(loading.client(), [user("Too early")])
        gate.set()
    assert (health.status_code, health.headers["retry-after"]) == (503, "1")
    assert health.json()["error"]["message"] == "the model is loading (held by the test 0/1); retry in a moment"
    assert refused.value.status_code == 503


def test_a_client_that_sends_no_headers_is_cut_off(api, monkeypatch):
    monkeypatch.setattr(api_server, "HEADER_TIMEOUT_S", 0.2)
    with socket.create_connection(("127.0.0.1", api.port), timeout=WAIT) as idle:
        idle.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")  # and never the rest
        assert idle.recv(1) == b""  # closed by the server


def test_a_request_whose_client_leaves_while_it_waits_never_runs(api):
    blocker = Blocker(api.service)
    try:
        with pytest.raises(httpx2.ReadTimeout):
            httpx2.post(f"{api.base_url}/chat/completions", timeout=0.5,
                        json={"model": "x", "messages": [user("Gone before my turn")], **GREEDY})
        deadline = time.monotonic() + WAIT
        while api.service.status.queued:
            assert time.monotonic() < deadline, "the request stayed queued"
            time.sleep(0.01)
    finally:
        blocker.release.set()


def _poison(engine) -> str:
    """A state load that fails half-way, as a damaged state would: the session is poisoned."""
    snapshot = engine.snapshot()
    try:
        engine.restore(SessionSnapshot(snapshot.identity, snapshot.tokens, snapshot.state[: len(snapshot.state) // 2]))
    except SessionFatalError as exc:
        return str(exc)
    raise AssertionError("the half state loaded")


def test_a_poisoned_session_is_a_500_with_its_reason_and_the_next_request_is_served(tiny_chatml, tmp_path):
    with running_api(tiny_chatml, PROFILE, tmp_path) as fresh:
        client = fresh.client()
        chat(client, [user("Before")])
        kept = sorted(p.name for p in (tmp_path / "snapshots" / "blobs").iterdir())
        fresh.service.submit(lambda engine, token: _poison(engine)).future.result(WAIT)
        with pytest.raises(openai.InternalServerError) as failed:
            chat(client, [user("While poisoned")])
        after = chat(client, [user("After")])
        assert "the session is poisoned" in failed.value.message
        assert "reopened for the next request" in failed.value.message
        assert after.choices[0].finish_reason in ("stop", "length")
        assert set(kept) <= {p.name for p in (tmp_path / "snapshots" / "blobs").iterdir()}


def test_each_request_is_in_the_trace_as_queued_then_served(tiny_chatml, tmp_path):
    trace = tmp_path / "api.jsonl"
    with running_api(tiny_chatml, PROFILE, tmp_path, trace=trace) as traced:
        first = chat(traced.client(), [system("Traced."), user("One")])
        chat(traced.client(), [system("Traced."), user("One"), reply_message(first), user("Two")])
        with pytest.raises(openai.BadRequestError):
            chat(traced.client(), [user("word " * 1200)])
    events = [json.loads(line) for line in trace.read_text().splitlines()]
    requests = [(e["kind"], e["request"]) for e in events if e["kind"] in ("request_queued", "request_served")]
    ids = list(dict.fromkeys(r for _, r in requests))
    assert requests == [(kind, r) for r in ids for kind in ("request_queued", "request_served")]
    served = [e for e in events if e["kind"] == "request_served"]
    assert [(e["status"], e["conversation"], e["route"]) for e in served] == [
        ("done", "c1", "cold"), ("done", "c1", "resident"), ("failed", "", "")]
    assert served[1]["reused"] == first.usage.prompt_tokens + first.usage.completion_tokens
    assert served[1]["divergence"]["kind"] == "appended"
    assert [s[0] for s in served[1]["segments"]] == ["system", "message 1 (user)", "message 2 (assistant)",
                                                     "message 3 (user)", "generation prompt"]
    assert served[2]["error"].startswith("the request (1")
    routed = [e for e in events if e["kind"] == "request_routed"]
    assert [e["request"] for e in routed] == ids[:2]


def test_a_request_turn_is_explained_by_its_route_not_as_a_dropped_tail(tiny_chatml, tmp_path):
    trace = tmp_path / "api.jsonl"
    with running_api(tiny_chatml, PROFILE, tmp_path, trace=trace) as traced:
        chat(traced.client(), [system("About apples."), user("One")])
        chat(traced.client(), [system("About bridges."), user("Two")])
    timeline = Timeline()
    for event in read_trace(trace).events:
        timeline.feed(event)
    first, second = (timeline.explain(turn) for turn in sorted(timeline.turns))
    assert (first.cause, second.cause) == (FIRST_TURN, REQUEST_SHARED)
    assert second.detail.startswith("the request shared ")
