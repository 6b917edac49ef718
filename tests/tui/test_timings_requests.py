"""The timings screen's charts of an endpoint's requests: offered by `r` once the session
has requests; an SVG baseline of a fixed, hand-made API session; and a real trace of API
traffic on the tiny model, replayed in the console.

The hand-made session (t_ms in engine milliseconds), each request one engine turn with a
12-token reply:

    #1 c1  240 prompt tokens, nothing reused (a new conversation)
    #2 c1  290, 252 reused (appended)
    #3 c1  340, 302 reused (appended), after 41 ms in the queue
    #4 c1  352, 25 reused: the client changed the system prompt (the drop)
    #5 c2  180, 14 reused (a new conversation: the template's start), after 120 ms in the queue
    #6 c2  226, 192 reused (appended)
"""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.containers import Grid
from textual.widgets import Static

from effctx_core.engine import TurnResult
from effctx_core.events.reader import read_trace
from effctx_core.events.timeline import Timeline
from effctx_core.events.trace import (
    Event,
    PrefillChunk,
    PrefixChecked,
    RequestServed,
    TokenDecoded,
    TurnFinished,
    TurnStarted,
)
from effctx_core.profiles import Profile
from effctx_core.units import format_share
from effctx_tui.app import EffctxApp
from effctx_tui.console import ConsoleApp
from effctx_tui.screens.timings import TimingsScreen, request_summary
from effctx_tui.widgets.request_charts import HitRateChart
from tests.helpers.api_server import CHATML_TOKENS, HERMES_CHATML, running_api
from tests.helpers.pilot_wait import wait_for
from tests.helpers.tiny_gguf import write_tiny_llama_gguf

REPLY = 12  # tokens of every hand-made reply


def request_turn(n: int, conversation: str, prompt: int, reused: int, dropped: int, kind: str, ttft_ms: float,
                 queue_ms: float) -> list[Event]:
    """One request's engine turn as the engine reports it: the turn starts from the tokens
    the request shares with the tape, and drops the rest of the tape."""
    t0, computed = n * 1000.0, prompt - reused
    result = TurnResult(
        text="", stop_reason="max_tokens", reused=reused, prefilled=computed, generated=REPLY, dropped=dropped,
        evicted=0, prefix_reason="", ttft_ms=ttft_ms, prefill_ms=ttft_ms - 4, decode_ms=REPLY * 14.0,
        prefill_tps=computed / (ttft_ms - 4) * 1000, decode_tps=1000 / 14, resident=prompt + REPLY,
        available=4096 - prompt - REPLY, n_ctx=4096)
    return [
        TurnStarted(turn=n, input_text=f"message {n}", prefix_tokens=reused, suffix_tokens=computed, t_ms=t0),
        PrefixChecked(turn=n, reused=reused, prefilled=0, dropped=dropped, resident=reused, reason="",
                      cause="diverged" if dropped else "identical" if reused else "empty",
                      diverged_at=reused if dropped else None, t_ms=t0 + 0.5),
        PrefillChunk(turn=n, stage="prefill", start=reused, tokens=computed, done=computed, total=computed,
                     ms=ttft_ms - 4, t_ms=t0 + ttft_ms - 4),
        *(TokenDecoded(turn=n, index=i, token=i, text="x", ms=12.0, t_ms=t0 + ttft_ms + 14.0 * i)
          for i in range(REPLY)),
        TurnFinished(turn=n, result=result, t_ms=t0 + ttft_ms + 14.0 * REPLY),
        RequestServed(request=f"chatcmpl-7b41d3e09a2f5c68{n:08d}", status="done", conversation=conversation, turn=n,
                      prompt_tokens=prompt, reused=reused, computed=computed, dropped=dropped, route="resident",
                      ttft_ms=ttft_ms, generated=REPLY, queue_ms=queue_ms, divergence={"kind": kind},
                      t_ms=t0 + ttft_ms + 14.0 * REPLY + 1),
    ]


def api_timeline() -> Timeline:
    timeline = Timeline()
    for request in [
        # n, conversation, prompt, reused, dropped (the rest of the tape: the previous
        # request's prompt and its 12-token reply), divergence, TTFT ms, queue ms
        (1, "c1", 240, 0, 0, "new_conversation", 310.0, 0.8),
        (2, "c1", 290, 252, 0, "appended", 52.0, 0.6),
        (3, "c1", 340, 302, 0, "appended", 55.0, 41.0),
        (4, "c1", 352, 25, 327, "system_changed", 402.0, 0.7),
        (5, "c2", 180, 14, 350, "new_conversation", 230.0, 120.0),
        (6, "c2", 226, 192, 0, "appended", 50.0, 0.5),
    ]:
        for event in request_turn(*request):
            timeline.feed(event)
    return timeline


class TimingsApp(ConsoleApp):
    def __init__(self, timeline: Timeline) -> None:
        super().__init__(theme="effctx-dark")
        self.timeline = timeline

    def on_mount(self) -> None:
        self.push_screen(TimingsScreen(self.timeline))


def offered(app) -> list[tuple[str, str]]:
    """The timings screen's own keys its footer shows now (the app's aside)."""
    return [(key, active.binding.description) for key, active in app.screen.active_bindings.items()
            if active.node is app.screen and active.binding.show]


@pytest.mark.parametrize("size", [(100, 30), (160, 48)], ids=["100x30", "160x48"])
def test_snapshot_of_the_requests_of_a_fixed_api_session(snap_compare, size):
    assert snap_compare(TimingsApp(api_timeline()), press=["r"], terminal_size=size)


def test_the_request_summary_names_the_drop_and_each_conversations_rate():
    assert request_summary(api_timeline().requests).plain == (
        "6 requests in 2 conversations\n"
        "reused 785 of 1,628 prompt tokens (48%)\n"
        "drop at #4 00000004 (c1): 89% → 7%, system_changed\n"
        "c1: 4 requests, 47% reused\n"
        "c2: 2 requests, 51% reused"
    )


async def test_the_requests_key_is_offered_once_a_request_was_served():
    timeline = Timeline()
    app = TimingsApp(timeline)
    async with app.run_test(size=(100, 30)) as pilot:
        assert offered(app) == [("escape", "Back")]
        for event in request_turn(1, "c1", 240, 0, 0, "new_conversation", 310.0, 0.8):
            timeline.feed(event)
        await wait_for(pilot, lambda: app.screen.sub_title == "1 turn · 1 request")
        assert offered(app) == [("escape", "Back"), ("r", "Requests")]


async def test_the_requests_key_switches_to_their_charts_and_back():
    app = TimingsApp(api_timeline())
    async with app.run_test(size=(100, 30)) as pilot:
        shown = lambda: [grid.id for grid in app.screen.query(Grid) if grid.display]  # noqa: E731
        await pilot.press("r")
        assert (shown(), offered(app)) == (["timings-requests"], [("escape", "Back"), ("r", "Turns")])
        await pilot.press("r")
        assert (shown(), offered(app)) == (["timings-charts"], [("escape", "Back"), ("r", "Requests")])


@pytest.fixture(scope="module")
def api_traffic(tmp_path_factory) -> tuple[Path, list]:
    """A trace of real API traffic on the tiny model and the responses: a conversation of
    three appended turns after its first, then a request whose system prompt changed, then
    a second conversation of two requests."""
    folder = tmp_path_factory.mktemp("timings-requests")
    model = write_tiny_llama_gguf(folder / "tiny-chatml.gguf", chat_template=HERMES_CHATML,
                                  special_tokens=CHATML_TOKENS, eot_token="<|im_end|>")
    trace, responses = folder / "api.jsonl", []
    with running_api(model, Profile(name="timings-requests", n_ctx=1024), folder / "state", trace=trace) as api:
        client = api.client()

        def chat(messages: list[dict]) -> dict:
            response = client.chat.completions.create(model="any", messages=messages, temperature=0, max_tokens=4)
            responses.append(response)
            return response.choices[0].message.model_dump(exclude_none=True)

        system = {"role": "system", "content": "You book trains and hotels across Europe. Keep answers short."}
        travel = [system, {"role": "user", "content": "I want to go to Rome."}]
        for question in ("In May, please.", "Two people, one room.", "Near the station."):
            travel += [chat(travel), {"role": "user", "content": question}]
        chat(travel)
        chat([{"role": "system", "content": "You book trains and hotels. Answer in French."}, *travel[1:]])
        sheep = [{"role": "system", "content": "You count sheep."}, {"role": "user", "content": "One sheep"}]
        chat(sheep + [chat(sheep), {"role": "user", "content": "Two sheep"}])
    return trace, responses


@pytest.mark.model
async def test_a_replayed_api_session_charts_its_requests_and_marks_the_drop_at_its_request(api_traffic):
    trace, responses = api_traffic
    kinds = [r.model_extra["effctx"]["divergence"]["kind"] for r in responses]
    assert kinds == ["new_conversation", "appended", "appended", "appended", "system_changed",
                     "new_conversation", "appended"]
    app = EffctxApp(replay=read_trace(trace), replay_speed=64)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: app.player.done and app.session_screen.turns_done == 7, seconds=30)
        await pilot.press("ctrl+g", "r")
        timings = app.screen
        assert isinstance(timings, TimingsScreen) and timings.sub_title == "7 turns · 7 requests"
        requests = timings.timeline.requests
        assert {name: [p.number for p in points] for name, points in requests.conversations().items()} == \
            {"c1": [1, 2, 3, 4, 5], "c2": [6, 7]}
        assert [p.hit_rate for p in requests.points] == [
            r.usage.prompt_tokens_details.cached_tokens / r.usage.prompt_tokens for r in responses]
        await pilot.pause(0.2)
        chart = str(timings.query_one(HitRateChart).render())
        assert "Cache hit rate per request (%)" in chart and "c1" in chart and "c2" in chart
        assert chart.count("●") == 1 and "#5 system_changed ●" in chart  # right of the middle: it reads leftwards
        before, after = (r.usage.prompt_tokens_details.cached_tokens / r.usage.prompt_tokens for r in responses[3:5])
        summary = str(timings.query_one("#timings-request-summary", Static).render())
        assert f"drop at #5 {responses[4].id[-8:]} (c1): {format_share(before)} → {format_share(after)}, " \
            "system_changed" in summary
