"""The requests screen and the request inspector, driven only by events: a real endpoint's
trace played in the console (`--replay`), and hand-made events for the live states and
for ten thousand requests; and the snapshots screen's conversations in that replay."""

from __future__ import annotations

from importlib import resources

import pytest
from textual.widgets import Static

from effctx_core.events.reader import Trace, read_trace
from effctx_core.events.requests import RequestLog
from effctx_core.events.trace import (
    PrefillChunk,
    RequestQueued,
    RequestRouted,
    RequestServed,
    SessionOpened,
    TokenDecoded,
)
from effctx_tui.app import EffctxApp
from effctx_tui.console import ConsoleApp
from effctx_tui.screens.request_inspector import RequestInspector, changed_span
from effctx_tui.screens.requests import RequestsScreen
from effctx_tui.screens.snapshots import SnapshotsScreen
from effctx_tui.widgets.request_table import COLUMNS, FLEX, GAP, RequestTable
from effctx_tui.widgets.snapshot_tree import SnapshotTreeView
from tests.helpers.api_traffic import STARTED, pinned, record_traffic
from tests.helpers.pilot_wait import wait_for

# The labels of the traffic's requests (api_traffic.send_traffic), in the order sent.
FIRST, APPENDED, SYSTEM_CHANGED, DATE_CHANGED, TOOLS_REORDERED, SECOND_CONVERSATION = (
    "user: Plan a trip to Rome", "user: And Paris?", "user: And Rome again?", "user: Which day is it?",
    "user: Weather there?", "user: Fix the loop")


@pytest.fixture(scope="module")
def api_trace(tmp_path_factory) -> Trace:
    """The traffic through a real endpoint over the tiny ChatML model, as its trace recorded
    it, with the clock and the measured times pinned (api_traffic.pinned)."""
    return pinned(read_trace(record_traffic(tmp_path_factory.mktemp("api-traffic"))))


async def played(pilot) -> None:
    """The replay played to its end, then the requests screen opened (Ctrl+Y)."""
    await wait_for(pilot, lambda: pilot.app.player.done, seconds=30)
    await pilot.press("ctrl+y")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, RequestsScreen), seconds=5)


def table_of(app) -> RequestTable:
    return app.screen.query_one(RequestTable)


def lines(app) -> list[str]:
    """The table's rows as drawn, each with its runs of spaces made one."""
    table = table_of(app)
    return [" ".join(table.render_line(y).text.split()) for y in range(1, table.shown + 1)]


def labels(app) -> list[str]:
    """The rows' requests, by their last message, top to bottom."""
    table = table_of(app)
    return [table.row_at(i).served.label for i in range(table.shown)]


def cell(app, y: int, title: str) -> str:
    """The text of line `y`'s cell of the column `title`, one left of the divergence column
    (whose width is the room left)."""
    at = next(i for i, column in enumerate(COLUMNS) if column.title == title)
    assert at < FLEX
    x = 1 + sum(column.width + GAP for column in COLUMNS[:at])
    return table_of(app).render_line(y).text[x:x + COLUMNS[at].width].strip()


def summary(app) -> str:
    return str(app.screen.query_one("#requests-summary", Static).render())


async def inspect(pilot, label: str) -> RequestInspector:
    table = table_of(pilot.app)
    table.select_display(next(i for i in range(table.shown) if table.row_at(i).served.label == label))
    await pilot.press("enter")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, RequestInspector), seconds=5)
    return pilot.app.screen


def text(screen, selector: str) -> list[str]:
    return str(screen.query_one(selector, Static).render()).splitlines()


# ------------------------------------------------------------------ the recorded traffic


@pytest.mark.model
async def test_the_table_lists_the_requests_newest_first_with_their_route_and_divergence(api_trace, utc):
    app = EffctxApp(replay=api_trace, replay_speed=64)
    async with app.run_test(size=(160, 48)) as pilot:
        await played(pilot)
        assert lines(app) == [
            "17:03:43 c2 done 44 12 32 resident new conversation 21 ms 100 tok/s length",
            "17:03:39 c1 done 686 121 565 resident tools @121 · tools changed 288 ms 100 tok/s length",
            "17:03:34 c1 done 649 42 607 resident system @42 · date changed 308 ms 100 tok/s length",
            "17:03:30 c1 done 612 14 598 resident system @14 · system changed 304 ms 100 tok/s length",
            "17:03:26 c1 done 577 548 29 resident appended 20 ms 100 tok/s length",
            "17:03:22 c1 done 540 0 540 cold new conversation 275 ms 100 tok/s length",
        ]
        assert app.screen.sub_title == "6 requests · 2 conversations · 3 misses"


@pytest.mark.model
async def test_misses_only_hides_the_appended_request_and_the_new_conversations(api_trace):
    app = EffctxApp(replay=api_trace, replay_speed=64)
    async with app.run_test(size=(160, 48)) as pilot:
        await played(pilot)
        await pilot.press("m")
        assert labels(app) == [TOOLS_REORDERED, DATE_CHANGED, SYSTEM_CHANGED]
        assert summary(app) == "showing all conversations · misses only: 3 of 6"


@pytest.mark.model
async def test_the_conversation_key_shows_each_conversation_in_turn_then_all(api_trace):
    app = EffctxApp(replay=api_trace, replay_speed=64)
    async with app.run_test(size=(160, 48)) as pilot:
        await played(pilot)
        await pilot.press("c")
        assert labels(app) == [TOOLS_REORDERED, DATE_CHANGED, SYSTEM_CHANGED, APPENDED, FIRST]
        assert summary(app) == "showing conversation c1 · hits and misses: 5 of 6"
        await pilot.press("c")
        assert labels(app) == [SECOND_CONVERSATION]
        await pilot.press("c")
        assert len(labels(app)) == 6


@pytest.mark.model
async def test_the_inspector_names_a_changed_system_prompt_at_its_token_with_both_texts(api_trace):
    app = EffctxApp(replay=api_trace, replay_speed=64)
    async with app.run_test(size=(160, 48)) as pilot:
        await played(pilot)
        inspector = await inspect(pilot, SYSTEM_CHANGED)
        assert text(inspector, "#inspector-divergence") == [
            "the system prompt changed",
            "first differing token 14 · in system, 14 tokens in · against n2",
            "was   system⏎You are a travel agent. To",
            "now   system⏎You are a tour agent. Toda",
        ]
        assert inspector.query_one("#version-tail-a").border_title == "system · as the conversation had it"
        assert text(inspector, "#version-text-a") == [
            " system", "You are a travel agent. Today is 2026-12-05 17:03:22. Keep answers short."]
        assert text(inspector, "#version-text-b") == [
            " system", "You are a tour agent. Today is 2026-12-05 17:03:22. Keep answers short."]


@pytest.mark.model
async def test_the_inspector_names_a_changed_timestamp_as_a_date_or_time(api_trace):
    app = EffctxApp(replay=api_trace, replay_speed=64)
    async with app.run_test(size=(160, 48)) as pilot:
        await played(pilot)
        inspector = await inspect(pilot, DATE_CHANGED)
        assert text(inspector, "#inspector-divergence") == [
            "a date or time in the prompt changed",
            "first differing token 42 · in system, 42 tokens in · against n3",
            "was  26-12-05 17:03:22. Keep answ",
            "now  26-12-05 17:04:51. Keep answ",
        ]


@pytest.mark.model
async def test_the_inspector_names_a_reordered_tool_list_and_the_order_both_ways(api_trace):
    app = EffctxApp(replay=api_trace, replay_speed=64)
    async with app.run_test(size=(160, 48)) as pilot:
        await played(pilot)
        inspector = await inspect(pilot, TOOLS_REORDERED)
        assert text(inspector, "#inspector-divergence")[:3] == [
            "the tool list changed",
            "first differing token 121 · in tools, 60 tokens in · against n4",
            "reordered: get_weather, get_time → get_time, get_weather",
        ]


@pytest.mark.model
async def test_the_inspector_sets_what_the_request_computed_against_a_stable_prefix_modeled(api_trace):
    app = EffctxApp(replay=api_trace, replay_speed=64)
    async with app.run_test(size=(160, 48)) as pilot:
        await played(pilot)
        inspector = await inspect(pilot, SYSTEM_CHANGED)
        assert text(inspector, "#inspector-cost") == [
            "computed 598 tokens in 299 ms (measured)",
            "with a stable prefix: 27 tokens, about 14 ms at this request's prefill rate (modeled)",
            "571 tokens computed again that the conversation held",
        ]


@pytest.mark.model
async def test_the_inspector_lists_each_segment_with_the_tokens_of_it_reused(api_trace):
    app = EffctxApp(replay=api_trace, replay_speed=64)
    async with app.run_test(size=(160, 48)) as pilot:
        await played(pilot)
        inspector = await inspect(pilot, APPENDED)
        assert [line.rstrip() for line in text(inspector, "#inspector-segments")] == [
            "   reused (was resident)     computed",
            "system                     63 tokens      63 reused",
            "tools                     444 tokens     444 reused",
            "system                      3 tokens       3 reused",
            "message 1 (user)           20 tokens      20 reused",
            "message 2 (assistant)      21 tokens      18 reused",  # the reply's 8 tokens and its end
            "message 3 (user)           16 tokens       0 reused",
            "generation prompt          10 tokens       0 reused",
        ]


@pytest.mark.model
async def test_escape_closes_the_inspector(api_trace):
    app = EffctxApp(replay=api_trace, replay_speed=64)
    async with app.run_test(size=(160, 48)) as pilot:
        await played(pilot)
        await inspect(pilot, FIRST)
        await pilot.press("escape")
        assert isinstance(app.screen, RequestsScreen)


@pytest.mark.model
async def test_the_replays_snapshot_tree_shows_each_conversation_by_its_name_and_n_renames_it(api_trace):
    app = EffctxApp(replay=api_trace, replay_speed=64)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: app.player.done, seconds=30)
        await pilot.press("ctrl+t")
        await wait_for(pilot, lambda: isinstance(app.screen, SnapshotsScreen), seconds=5)
        screen = app.screen
        status = screen.query_one("#snapshots-status", Static)
        await pilot.press("v")
        assert set(screen.query_one(SnapshotTreeView)._views) == {"n0", "n1", "n2", "n3", "n4", "n5"}
        assert str(status.render()) == \
            "7 nodes · conversation c1 'user: Plan a trip to Rome': 5 requests · at n6 'c2 · user: Fix the loop'"
        await pilot.press("v", "n", "ctrl+u", *"Bug hunt", "enter")
        assert set(screen.query_one(SnapshotTreeView)._views) == {"n0", "n6"}
        assert str(status.render()) == \
            "7 nodes · conversation c2 'Bug hunt': 1 request · at n6 'c2 · Bug hunt'\nnamed conversation c2"


@pytest.mark.model
@pytest.mark.parametrize("size", [(100, 30), (160, 48)], ids=lambda size: f"{size[0]}x{size[1]}")
def test_snapshot_of_the_requests_screen(snap_compare, api_trace, utc, size):
    app = EffctxApp(replay=api_trace, replay_speed=64, theme="effctx-dark")
    assert snap_compare(app, terminal_size=size, run_before=played)


@pytest.mark.model
@pytest.mark.parametrize("size", [(100, 30), (160, 48)], ids=lambda size: f"{size[0]}x{size[1]}")
def test_snapshot_of_the_inspector_of_a_changed_system_prompt(snap_compare, api_trace, utc, size):
    async def inspected(pilot) -> None:
        await played(pilot)
        await inspect(pilot, SYSTEM_CHANGED)

    app = EffctxApp(replay=api_trace, replay_speed=64, theme="effctx-dark")
    assert snap_compare(app, terminal_size=size, run_before=inspected)


# ------------------------------------------------------------------ without the endpoint


def demo(name: str) -> Trace:
    with resources.as_file(resources.files("effctx_tui") / "demos" / f"{name}.jsonl") as path:
        return read_trace(path)


async def test_a_trace_from_before_request_events_has_no_requests_to_show():
    app = EffctxApp(replay=demo("chat"), replay_speed=64)
    async with app.run_test(size=(100, 30)) as pilot:
        await played(pilot)
        table = table_of(app)
        assert table.render_line(1).text.strip() == "no requests in this session"
        assert [active.binding.description for active in app.screen.active_bindings.values()
                if active.node is app.screen and active.binding.show and active.enabled] == ["Back"]


# ------------------------------------------------------------------ hand-made events


class RequestsApp(ConsoleApp):
    """The requests screen over a log the test feeds."""

    def __init__(self, log: RequestLog) -> None:
        super().__init__(theme="effctx-dark")
        self.request_log = log

    def on_mount(self) -> None:
        self.push_screen(RequestsScreen(self.request_log))


def opened() -> RequestLog:
    log = RequestLog()
    log.feed(SessionOpened(backend="llama", model="m", n_ctx=4096, identity="x", started=STARTED))
    return log


def served(request: str, t_ms: float, conversation: str = "c1", **fields) -> RequestServed:
    return RequestServed(request=request, status="done", conversation=conversation, turn=1, prompt_tokens=100,
                         reused=90, computed=10, route="resident", finish="stop", ttft_ms=20.0, prefill_tps=500.0,
                         decode_tps=50.0, generated=4, divergence={"kind": "appended"}, t_ms=t_ms, **fields)


async def test_a_request_shows_queued_then_its_prefill_then_decoding_then_done():
    log = opened()
    app = RequestsApp(log)
    async with app.run_test(size=(160, 48)) as pilot:
        status = lambda: cell(app, 1, "status")  # noqa: E731
        log.feed(RequestQueued(request="r1", endpoint="chat", ahead=0, t_ms=1000.0))
        await wait_for(pilot, lambda: table_of(app).shown == 1, seconds=5)
        assert status() == "queued"
        log.feed(RequestRouted(turn=1, route="resident", shared=90, prompt_tokens=540, request="r1", t_ms=1100.0))
        log.feed(PrefillChunk(turn=1, stage="prefill", start=0, tokens=256, done=256, total=540, ms=9.0, t_ms=1200.0))
        await wait_for(pilot, lambda: status() == "prefilling 256/540", seconds=5)
        log.feed(TokenDecoded(turn=1, index=0, token=7, text="a", ms=5.0, t_ms=1300.0))
        await wait_for(pilot, lambda: status() == "decoding", seconds=5)
        log.feed(served("r1", 1400.0))
        await wait_for(pilot, lambda: status() == "done", seconds=5)


async def test_the_cursor_stays_on_its_request_when_newer_ones_arrive():
    log = opened()
    log.feed(served("r1", 1000.0))
    log.feed(served("r2", 2000.0))
    app = RequestsApp(log)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("down")
        assert table_of(app).cursor_row.request == "r1"
        log.feed(served("r3", 3000.0))
        await wait_for(pilot, lambda: table_of(app).shown == 3, seconds=5)
        assert table_of(app).cursor_row.request == "r1"


async def test_ten_thousand_requests_draw_newest_first_and_end_goes_to_the_oldest(utc):
    # A benchmark with no clock: the table takes the rows in once and draws only the lines
    # in view (see the README for the times measured).
    log = opened()
    for i in range(10_000):
        log.feed(RequestQueued(request=f"r{i}", endpoint="chat", ahead=0, t_ms=1000.0 * i))
        log.feed(served(f"r{i}", 1000.0 * i + 500, conversation=f"c{i % 7 + 1}"))
    app = RequestsApp(log)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        table = table_of(app)
        assert (table.shown, table.row_at(0).request) == (10_000, "r9999")
        assert table.render_line(1).text.split()[:3] == ["19:50:01", "c4", "done"]
        await pilot.press("end")
        assert table.cursor_row.request == "r0"
        assert table.render_line(table.scrollable_content_region.height - 1).text.split()[:2] == ["17:03:22", "c1"]
        await pilot.press("c")  # one conversation of seven: the one rebuild of the shown rows
        assert table.shown == 1_429
        log.feed(served("r10000", 1000.0 * 10_000, conversation="c1"))
        await wait_for(pilot, lambda: table.shown == 1_430, seconds=5)


def test_the_changed_span_of_two_versions_is_the_changed_words():
    assert changed_span("You are a travel agent. Today", "You are a tour agent. Today") == (10, 16, 14)


async def test_the_inspector_of_a_failed_request_gives_its_error_and_nothing_it_did_not_do(utc):
    log = opened()
    log.feed(RequestQueued(request="r1", endpoint="chat", ahead=0, t_ms=1000.0))
    log.feed(RequestServed(request="r1", status="failed", error="the request (1,207 tokens) is over the context",
                           t_ms=1100.0))
    app = RequestsApp(log)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, RequestInspector), seconds=5)
        assert text(app.screen, "#inspector-summary") == [
            "r1  17:03:23", "failed",
            "the request (1,207 tokens) is over the context"]
        assert not app.screen.query("#inspector-divergence")


async def test_the_help_lists_the_requests_screen_s_keys_and_its_table_s():
    from tests.helpers.theme_fixtures import StripApp
    from tests.tui.test_help_screen import help_rows

    app = StripApp()
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("f1")
        assert help_rows(app, "requests") == [
            ("⏎", "Inspect"), ("c", "Conversation"), ("m", "Misses only"), ("esc", "Back"), ("↑ k", "Newer"),
            ("↓ j", "Older"), ("pgup", "Page up"), ("pgdn", "Page down"), ("home", "Newest"), ("end", "Oldest"),
            ("←", "Scroll left"), ("→", "Scroll right")]
        assert help_rows(app, "request-inspector") == [("esc q", "Close")]
