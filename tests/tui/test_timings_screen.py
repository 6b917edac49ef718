"""The timings screen: on the real default model behind the session screen, and as an
SVG snapshot of a fixed, hand-made session.

The hand-made session (t_ms in engine milliseconds):

    turn 1  empty cache, 1,200 tokens prefilled in three chunks, 6 tokens decoded
    turn 2  everything reused (1,206), 40 new tokens, 6 decoded
    turn 3  an edit at token 600: 600 reused, 652 dropped, 652 re-prefilled + 30 new
    turn 4  a stop text past the tape: 4 dropped, 1,888 reused, 25 new
    turn 5  one new token, its chunk too quick for the clock (0 ms), cancelled before
            the first token
"""

from __future__ import annotations

import io

import pytest
from rich.console import Console
from rich.style import Style
from textual.app import App
from textual.widgets import Static

from effctx_core.engine import TurnResult
from effctx_core.events.explain import EXTENDS
from effctx_core.events.timeline import Timeline
from effctx_core.events.trace import PrefillChunk, PrefixChecked, TokenDecoded, TurnFinished, TurnStarted
from effctx_tui.app import EffctxApp
from effctx_tui.screens.timings import TimingsScreen, explanation_row, summary
from effctx_tui.widgets.timing_charts import Axis, tick_labels, ticks
from tests.helpers.pilot_wait import wait_for

SIZE = (140, 44)
WORDS = ["the ", "cat ", "sat ", "on ", "a ", "mat ", "under ", "sun "]


def words(tokens) -> str:
    return "".join(WORDS[t % len(WORDS)] for t in tokens)


def finished(n, reused, prefilled, generated, resident, ttft_ms, dropped=0, t_ms=0.0,
             stop_reason="max_tokens") -> TurnFinished:
    return TurnFinished(turn=n, t_ms=t_ms, result=TurnResult(
        text="", stop_reason=stop_reason, reused=reused, prefilled=prefilled, generated=generated, dropped=dropped,
        evicted=0, prefix_reason="", ttft_ms=ttft_ms, prefill_ms=0.0, decode_ms=0.0, prefill_tps=0.0,
        decode_tps=0.0, resident=resident, available=8192 - resident, n_ctx=8192,
    ))


def decoded(n, resident, t0, gaps) -> list:
    events, t = [], t0
    for i, gap in enumerate(gaps):
        t += gap
        events.append(TokenDecoded(turn=n, index=i, token=i, text="x", ms=0.4, t_ms=t))
    return events


def session_events() -> list:
    chunk = lambda n, stage, start, tokens, ms, t: PrefillChunk(  # noqa: E731
        turn=n, stage=stage, start=start, tokens=tokens, done=tokens, total=tokens, ms=ms, t_ms=t)
    return [
        TurnStarted(turn=1, input_text="a", prefix_tokens=0, suffix_tokens=1200, t_ms=1000.0),
        PrefixChecked(turn=1, reused=0, prefilled=0, dropped=0, resident=0, reason="empty cache", t_ms=1000.5),
        chunk(1, "prefill", 0, 512, 160.0, 1161.0),
        chunk(1, "prefill", 512, 512, 190.0, 1351.0),
        chunk(1, "prefill", 1024, 176, 75.0, 1426.0),
        *decoded(1, 1200, 1440.0, [12.0, 11.5, 12.5, 13.0, 12.0, 11.0]),
        finished(1, 0, 1200, 6, 1206, 452.0, t_ms=1520.0),
        TurnStarted(turn=2, input_text="b", prefix_tokens=1206, suffix_tokens=40, t_ms=3000.0),
        PrefixChecked(turn=2, reused=1206, prefilled=0, dropped=0, resident=1206, reason="extends the resident tape",
                      t_ms=3000.5),
        chunk(2, "prefill", 1206, 40, 30.0, 3031.0),
        *decoded(2, 1246, 3040.0, [13.0, 12.5, 14.0, 13.5, 13.0, 12.0]),
        finished(2, 1206, 40, 6, 1252, 48.0, t_ms=3120.0),
        TurnStarted(turn=3, input_text="c", prefix_tokens=1252, suffix_tokens=30, t_ms=5000.0),
        chunk(3, "prefix", 0, 512, 200.0, 5201.0),
        chunk(3, "prefix", 512, 140, 60.0, 5262.0),
        PrefixChecked(turn=3, reused=600, prefilled=652, dropped=652, resident=1252,
                      reason="diverges from the resident tape at token 600", t_ms=5263.0),
        chunk(3, "prefill", 1252, 30, 25.0, 5289.0),
        *decoded(3, 1282, 5300.0, [14.0, 15.0, 14.5, 16.0, 15.0, 14.0]),
        finished(3, 600, 682, 6, 1288, 305.0, dropped=652, t_ms=5390.0),
        TurnStarted(turn=4, input_text="d", prefix_tokens=1288, suffix_tokens=25, t_ms=7000.0),
        PrefixChecked(turn=4, reused=1288, prefilled=0, dropped=4, resident=1288,
                      reason="diverges from the resident tape at token 1288", t_ms=7000.5),
        chunk(4, "prefill", 1288, 25, 22.0, 7023.0),
        *decoded(4, 1313, 7030.0, [15.0, 14.5, 16.0, 15.5, 15.0, 16.5]),
        finished(4, 1288, 25, 6, 1319, 35.0, dropped=4, t_ms=7125.0),
        TurnStarted(turn=5, input_text="e", prefix_tokens=1319, suffix_tokens=1, t_ms=9000.0),
        PrefixChecked(turn=5, reused=1319, prefilled=0, dropped=0, resident=1319, reason="extends the resident tape",
                      t_ms=9000.5),
        chunk(5, "prefill", 1319, 1, 0.0, 9000.5),
        finished(5, 1319, 1, 0, 1320, None, t_ms=9120.0, stop_reason="cancelled"),
    ]


def fixed_timeline() -> Timeline:
    tape = list(range(1252))
    timeline = Timeline(detokenize=words, tape=lambda: tape)
    for event in session_events():
        if isinstance(event, TurnStarted) and event.turn == 3:
            tape = tape[:600] + [6, 7, 6, 7] + tape[604:]  # the edit: "under sun under sun"
        timeline.feed(event)
    return timeline


class TimingsApp(App):
    def on_mount(self) -> None:
        self.push_screen(TimingsScreen(fixed_timeline()))


@pytest.mark.parametrize("size", [(100, 30), (160, 48)], ids=["100x30", "160x48"])
def test_snapshot_of_a_fixed_session(snap_compare, size):
    assert snap_compare(TimingsApp(), terminal_size=size)


def test_a_turn_cancelled_before_its_first_token_has_no_ttft():
    timeline = fixed_timeline()
    assert timeline.ttft() == [(1, 452.0), (2, 48.0), (3, 305.0), (4, 35.0)]
    assert explanation_row(timeline.explain(5), timeline.turns[5].ttft_ms, Style())[5] == ""


def test_the_session_prefill_speed_counts_only_timed_chunks():
    timeline = fixed_timeline()
    assert [c.tps for c in timeline.turns[5].chunks] == [None]
    # 1,947 tokens in 762 ms of timed chunks; turn 5's one token took no measurable time
    assert "prefill 2,555 tok/s over 1,947 tokens" in summary(timeline).plain


def test_durations_are_in_ms_or_s_and_the_ttft_column_says_its_unit():
    timeline = fixed_timeline()
    assert explanation_row(timeline.explain(1), timeline.turns[1].ttft_ms, Style())[5] == "452 ms"
    assert "decode 14 ms per token (mean gap)" in summary(timeline).plain


@pytest.mark.parametrize(("lo", "hi", "whole", "values", "labels"), [
    (512, 1313, True, [600, 800, 1000, 1200], ["600", "800", "1,000", "1,200"]),  # token positions
    (1, 23, True, [5, 10, 15, 20], ["5", "10", "15", "20"]),
    (0, 1.8, False, [0, 0.5, 1.0, 1.5], ["0.0", "0.5", "1.0", "1.5"]),
    (0, 2, True, [0, 1, 2], ["0", "1", "2"]),  # a whole axis never has a tick between two integers
    (0, 12, False, [0, 2.5, 5.0, 7.5, 10.0], ["0.0", "2.5", "5.0", "7.5", "10.0"]),  # a 2.5 step keeps its decimal
])
def test_chart_ticks_are_round_values_labelled_as_a_person_reads_them(lo, hi, whole, values, labels):
    ticks_, step = ticks(lo, hi, whole)
    assert (ticks_, tick_labels(ticks_, step)) == (values, labels)


def test_a_millisecond_axis_reaching_a_second_is_in_seconds():
    assert (Axis("ms", "since start").label(7144.3), Axis("ms").scale(7144.3)) == ("since start (s)", ("s", 1000.0))
    assert Axis("ms", "gap").label(850.0) == "gap (ms)"


async def test_the_explainer_shows_the_engine_numbers_of_turn_two(default_model):
    app = EffctxApp(max_tokens=4, checkpoints=None)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.session_screen
        await wait_for(pilot, lambda: screen.ready)
        await pilot.press(*"Hello", "enter")
        await wait_for(pilot, lambda: screen.turns_done == 1)
        await pilot.press(*"And again", "enter")
        await wait_for(pilot, lambda: screen.turns_done == 2)
        await pilot.press("ctrl+g")
        timings = app.screen
        assert isinstance(timings, TimingsScreen)
        assert timings.timeline is screen.timeline

        last = screen.last_result
        e = timings.timeline.explain(2)
        assert (e.reused, e.computed, e.dropped) == (last.reused, last.prefilled, last.dropped)
        # Turn 1 stopped where the model opened the next user turn; the tape kept that
        # opening, so turn 2 went on from it, extending the resident tape: only its input computed.
        assert last.prefix_reason == "identical to the resident tape"
        assert (last.dropped, e.recomputed) == (0, 0)
        assert e.cause == EXTENDS
        assert e.detail == f"all {last.reused} resident tokens reused; only the {last.prefilled} new tokens computed"
        assert e.divergence is None  # nothing of the tape was cut
        console = Console(width=SIZE[0], record=True, file=io.StringIO())
        console.print(timings.query_one("#timings-table", Static).content)
        shown = " ".join(console.export_text().split())  # the why column wraps
        assert f"2 {last.reused} {last.prefilled} {last.dropped} 0" in shown
        assert e.detail in shown
        assert [t for t, _ in timings.timeline.ttft()] == [1, 2]

        await pilot.press("escape")
        assert app.screen is screen
