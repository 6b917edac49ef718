"""The timings screen: prefill and decode speed, TTFT, reuse and residency over the
session, and why each turn reused what it reused; when the engine served an endpoint,
the charts of its requests one key away (`r`): hit rate per request and conversation with
its drops marked, TTFT against the tokens computed, queue wait.

The screen reads a Timeline the session screen feeds with every engine event, from
the first one on, so the history is there when the screen opens. Events can arrive
hundreds of times a second while decoding; the screen polls the timeline's version at
10 Hz instead of redrawing per event.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Literal, Sequence

from rich.style import Style
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, VerticalScroll
from textual.screen import Screen
from textual.theme import Theme
from textual.widgets import Header, Static

from effctx_core.events.request_series import RequestSeries, hit_rate
from effctx_core.events.timeline import Explanation, Timeline
from effctx_core.units import format_count, format_counted, format_ms, format_rate, format_share
from effctx_tui.themes import rich_style
from effctx_tui.widgets.footer import EffctxFooter
from effctx_tui.widgets.request_charts import REQUEST_CHARTS
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


def request_summary(requests: RequestSeries) -> Text:
    """The requests in figures: their hit rate, each drop and the request behind it, each
    conversation's rate (drops first: at 100x30 the box shows six lines)."""
    points = requests.points
    conversations = requests.conversations()
    named = sum(1 for name in conversations if name)
    text = Text(f"{format_counted(len(points), 'request')} in {format_counted(named, 'conversation')}\n",
                style="bold")
    reused, prompt = sum(p.reused for p in points), sum(p.prompt_tokens for p in points)
    text.append(f"reused {format_count(reused)} of {format_counted(prompt, 'prompt token')} "
                f"({format_share(hit_rate(points))})")
    for drop in requests.drops():
        p = drop.point
        rates = format_share(p.hit_rate) if drop.before is None else \
            f"{format_share(drop.before)} → {format_share(p.hit_rate)}"
        text.append(f"\ndrop at #{p.number} {p.short_id} ({p.conversation or 'completion'}): {rates}, {drop.why}",
                    style="bold")
    for name, own in conversations.items():
        text.append(f"\n{name or 'completions'}: {format_counted(len(own), 'request')}, "
                    f"{format_share(hit_rate(own))} reused")
    return text


class TimingsScreen(Screen):
    BINDINGS = [
        Binding("escape", "back", "Back", tooltip="Back to the session"),
        # One key, two bindings: the footer names the view it switches to.
        Binding("r", "show('requests')", "Requests", tooltip="Charts of the endpoint's requests"),
        Binding("r", "show('turns')", "Turns", tooltip="Charts of the session's turns"),
    ]

    DEFAULT_CSS = """
    TimingsScreen {
        #timings-charts {
            grid-size: 3 2;
            grid-gutter: 1 2;
            height: 2fr;
        }
        /* The two per-request charts on the left, one above the other on the same x. */
        #timings-requests {
            display: none;
            grid-size: 2 2;
            grid-columns: 3fr 2fr;
            grid-gutter: 1 2;
            height: 2fr;
        }
        &.-requests {
            #timings-charts { display: none; }
            #timings-requests { display: block; }
        }
        /* no border: at 100x30 its two rows are half of what a chart's canvas gets */
        PlotextPlot { height: 1fr; }
        #timings-summary, #timings-request-summary {
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
        self._had_requests = False  # whether the footer offers the requests' charts
        self.view: Literal["turns", "requests"] = "turns"
        self.title = "Timings"

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        with Grid(id="timings-charts"):
            for chart in CHARTS:
                yield chart()
            yield Static(id="timings-summary")
        with Grid(id="timings-requests"):
            for chart in REQUEST_CHARTS:
                yield chart()
            yield Static(id="timings-request-summary")
        with VerticalScroll(id="timings-explainer"):
            yield Static(id="timings-table")
        yield EffctxFooter()

    def on_mount(self) -> None:
        self.query_one("#timings-explainer").border_title = "Why each turn reused what it reused"
        self.query_one("#timings-summary").border_title = "Session"
        self.query_one("#timings-request-summary").border_title = "Requests"
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
        requests = self.timeline.requests
        self.sub_title = format_counted(len(self.timeline.turns), "turn")
        if requests.points:
            for request_chart in REQUEST_CHARTS:
                self.query_one(request_chart).draw(self.timeline)
            self.query_one("#timings-request-summary", Static).update(request_summary(requests))
            self.sub_title += f" · {format_counted(len(requests.points), 'request')}"
        if bool(requests.points) != self._had_requests:  # the first request: its key appears
            self._had_requests = bool(requests.points)
            self.refresh_bindings()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The view key is offered only when the session has requests, and names the other view."""
        if action == "show":
            return self._had_requests and parameters[0] != self.view
        return True

    def action_show(self, view: Literal["turns", "requests"]) -> None:
        self.view = view
        self.set_class(view == "requests", "-requests")
        self.refresh_bindings()

    def action_back(self) -> None:
        self.app.pop_screen()
