"""The status line's speeds: only what was measured, in the unit a person reads."""

from __future__ import annotations

from dataclasses import replace

from textual.app import App, ComposeResult

from effctx_core.engine import TurnResult
from effctx_tui.widgets.status_line import StatusLine

DONE = TurnResult(text=" Paris.", stop_reason="stop", reused=40, prefilled=12, generated=3, dropped=0, evicted=0,
                  prefix_reason="", ttft_ms=1234.0, prefill_ms=80.0, decode_ms=60.0, prefill_tps=150.0,
                  decode_tps=33.3, resident=55, available=4041, n_ctx=4096)


class StatusApp(App):
    def __init__(self, done: TurnResult):
        super().__init__()
        self.done = done

    def compose(self) -> ComposeResult:
        yield StatusLine()

    def on_mount(self) -> None:
        self.query_one(StatusLine).show_turn(self.done, "extends the resident tape")


async def second_line(done: TurnResult) -> str:
    app = StatusApp(done)
    async with app.run_test(size=(120, 6)):
        return str(app.query_one(StatusLine).render()).splitlines()[1]


async def test_a_finished_turn_shows_its_ttft_in_seconds_and_both_rates():
    assert await second_line(DONE) == "TTFT 1.23 s · prefill 150 tok/s · decode 33.3 tok/s · extends the resident tape"


async def test_a_turn_cancelled_in_its_prefill_shows_no_ttft_and_no_decode_rate():
    cancelled = replace(DONE, stop_reason="cancelled", generated=0, ttft_ms=None, decode_ms=0.0, decode_tps=0.0)
    assert await second_line(cancelled) == "prefill 150 tok/s · extends the resident tape"


async def test_a_prefill_that_took_no_measurable_time_shows_no_prefill_rate():
    untimed = replace(DONE, prefilled=1, prefill_ms=0.0, prefill_tps=0.0, ttft_ms=40.0)
    assert await second_line(untimed) == "TTFT 40 ms · decode 33.3 tok/s · extends the resident tape"
