"""The timings screen: prefill and decode speed, TTFT, reuse and residency over the
session, and why each turn reused what it reused.

The screen reads a Timeline the session screen feeds with every engine event, from
the first one on, so the history is there when the screen opens. Events can arrive
hundreds of times a second while decoding; the screen polls the timeline's version at
10 Hz instead of redrawing per event.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Sequence

from rich.style import Style
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, VerticalScroll
from textual.screen import Screen
from textual.theme import Theme
from textual.widgets import Header, Static

from effctx_core.events.timeline import Explanation, Timeline
from effctx_core.units import format_ms, format_rate
from effctx_tui.themes import rich_style
from effctx_tui.widgets.footer import EffctxFooter
from effctx_tui.widgets.timing_charts import CHARTS, REUSED

if TYPE_CHECKING:
    from effctx_core.engine import ConsoleEngine

REFRESH_SECONDS = 0.1

def engine_timeline(engine: Callable[[], ConsoleEngine | None]) -> Timeline:
    """A timeline that reads the tape and text from an engine that may open later."""

    def detokenize(tokens: Sequence[int]) -> str:
        current = engine()
        assert current is not None  # the timeline detokenizes only around a turn, which an engine ran
        return current.detokenize(tokens)

    def tape() -> Sequence[int]:
        current = engine()
        return current.tape if current is not None else ()

    return Timeline(
        detokenize=detokenize,
        tape=tape,
    )


def _quoted(text: str) -> str:
    return repr(text) if text else "nothing"


def explanation_row(e: Explanation, ttft_ms: float | None, reused: Style) -> list[Text | str]:
    """`reused`: the style of the reused count, the charts' colour of reuse as the table draws it."""
    why = Text(e.detail)
    if e.divergence is not None:
        d = e.divergence
        why.append(f"\nat token {e.diverged_at:,} after {_quoted(d.before)}: was {_quoted(d.old)}, now {_quoted(d.new)}",
                   style="italic")
    return [
        str(e.turn),
        Text(f"{e.reused:,}", style=reused),
        f"{e.computed:,}",
        f"{e.dropped:,}",
        f"{e.evicted:,}",
        "" if ttft_ms is None else format_ms(ttft_ms),
        Text(e.cause, style="bold"),
        why,
    ]


def explanation_table(timeline: Timeline, reused: Style) -> Table:
    table = Table(expand=True, box=None, padding=(0, 1), header_style="bold")
    for name in ("turn", "reused", "computed", "dropped", "evicted", "TTFT"):
        table.add_column(name, justify="right", no_wrap=True)
    # The two share what the counts leave: a cause kept on one line left the why a column
    # of one or two words at 100 columns, and a turn four rows tall.
    table.add_column("cause", ratio=1)
    table.add_column("why", ratio=2)
    for e in timeline.explanations():
        table.add_row(*explanation_row(e, timeline.turns[e.turn].ttft_ms, reused))
    return table


def summary(timeline: Timeline) -> Text:
    records = [r for r in timeline.records() if r.check is not None]
    reused = sum(r.reused for r in records)
    computed = sum(r.computed for r in records)
    timed = [c for c in timeline.chunks() if c.tps is not None]
    gaps = timeline.token_gaps()
    text = Text(f"{len(records)} turns\n", style="bold")
    text.append(f"reused {reused:,} · computed {computed:,}")
    if reused + computed:
        text.append(f" ({reused / (reused + computed):.0%} reused)")
    tokens, ms = sum(c.tokens for c in timed), sum(c.ms for c in timed)
    if ms and (rate := format_rate(tokens / (ms / 1000))):
        text.append(f"\nprefill {rate} over {tokens:,} tokens")
    if gaps:
        text.append(f"\ndecode {format_ms(sum(g.gap_ms for g in gaps) / len(gaps))} per token (mean gap)")
    if timeline.resident:
        text.append(f"\nresident now {timeline.resident[-1][1]:,} tokens")
    return text


class TimingsScreen(Screen):
    BINDINGS = [Binding("escape", "back", "Back", tooltip="Back to the session")]

    DEFAULT_CSS = """
    TimingsScreen {
        #timings-charts {
            grid-size: 3 2;
            grid-gutter: 1 2;
            height: 2fr;
        }
        /* no border: at 100x30 its two rows are half of what a chart's canvas gets */
        PlotextPlot { height: 1fr; }
        #timings-summary {
            border: round $panel-lighten-2;
            height: 1fr;
            padding: 0 1;
        }
        #timings-explainer {
            height: 1fr;
            border: round $panel-lighten-2;
            border-title-color: $foreground;
            &:focus { border: round $accent; }
        }
    }
    """

    def __init__(self, timeline: Timeline) -> None:
        super().__init__()
        self.timeline = timeline
        self._drawn = -1  # the timeline version on screen
        self.title = "Timings"

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        with Grid(id="timings-charts"):
            for chart in CHARTS:
                yield chart()
            yield Static(id="timings-summary")
        with VerticalScroll(id="timings-explainer"):
            yield Static(id="timings-table")
        yield EffctxFooter()

    def on_mount(self) -> None:
        self.query_one("#timings-explainer").border_title = "Why each turn reused what it reused"
        self.query_one("#timings-summary").border_title = "Session"
        self.redraw()
        self.set_interval(REFRESH_SECONDS, self._poll)
        # The signal, not a watch on App.theme: it comes once the new theme's colours apply.
        self.app.theme_changed_signal.subscribe(self, self._restyle)

    def _restyle(self, _theme: Theme) -> None:
        # the charts and the table hold the colours of the theme they were drawn in
        self.redraw()

    def _poll(self) -> None:
        if self.timeline.version != self._drawn:
            self.redraw()

    def redraw(self) -> None:
        self._drawn = self.timeline.version
        for chart in CHARTS:
            self.query_one(chart).draw(self.timeline)
        self.query_one("#timings-summary", Static).update(summary(self.timeline))
        table = self.query_one("#timings-table", Static)
        table.update(explanation_table(self.timeline, rich_style(table, f"${REUSED}")))
        self.sub_title = f"{len(self.timeline.turns)} turns"

    def action_back(self) -> None:
        self.app.pop_screen()
