"""The timings screen's charts: one PlotextPlot each, redrawn from a Timeline.

Every chart clears and replots its whole series: a session has at most thousands of
points, which plotext draws in a few milliseconds, so no incremental bookkeeping.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from textual_plotext import PlotextPlot

from effctx_core.events.timeline import Timeline

# The same colour for the same meaning on every chart.
INPUT, RECOMPUTED, REUSED, LINE = "orange", "red", "green", "cyan"

# The same look for the same kind of series on every chart: plotext's call and options.
KINDS: dict[str, tuple[str, dict[str, Any]]] = {
    "dots": ("scatter", {"marker": "dot"}),
    "bars": ("bar", {"width": 0.5}),
    "line": ("plot", {"marker": "braille"}),
}


@dataclass(frozen=True)
class Series:
    kind: Literal["dots", "bars", "line"]
    x: list[float]
    y: list[float]
    colour: str
    label: str | None = None


def _turn_ticks(plt, turns: list[float]) -> None:
    # one tick per turn, but not so many that the labels run into each other
    step = max(1, len(turns) // 12)
    plt.xticks(turns[::step], [str(t) for t in turns[::step]])


def draw_chart(
    plot: PlotextPlot,
    title: str,
    xlabel: str,
    series: list[Series],
    *,
    headroom: float | None = None,
    turn_ticks: bool = False,
) -> None:
    """Replot `series` in order, leaving out empty ones. `headroom` starts the y axis at 0
    with that much room over the top for the legend; `turn_ticks` says x is turns."""
    shown = [s for s in series if s.x]
    plt = plot.plt
    plt.clear_data()
    plt.title(title + ("" if shown else " · no data yet"))
    plt.xlabel(xlabel)
    for s in shown:
        method, options = KINDS[s.kind]
        getattr(plt, method)(s.x, s.y, color=s.colour, label=s.label, **options)
    if shown and headroom:
        plt.ylim(0, max(max(s.y) for s in shown) * headroom or 1)
    if shown and turn_ticks:
        _turn_ticks(plt, shown[0].x)
    plot.refresh()


class TimingChart(PlotextPlot):
    """A chart of the timings screen: `draw` replots it from a Timeline."""

    def draw(self, timeline: Timeline) -> None:
        raise NotImplementedError


class PrefillSpeedChart(TimingChart):
    def draw(self, timeline: Timeline) -> None:
        chunks = timeline.chunks()
        series = []
        for stage, colour, label in (("prefill", INPUT, "input"), ("prefix", RECOMPUTED, "earlier tape")):
            points = [c for c in chunks if c.stage == stage]
            series.append(Series("dots", [c.end for c in points], [c.tps for c in points], colour, label))
        draw_chart(self, "Prefill tok/s per chunk, by position", "cache position (end of chunk)", series,
                   headroom=1.35)


class TTFTChart(TimingChart):
    def draw(self, timeline: Timeline) -> None:
        ttft = timeline.ttft()
        draw_chart(self, "TTFT per turn (ms)", "turn",
                   [Series("bars", [t for t, _ in ttft], [ms for _, ms in ttft], LINE)], turn_ticks=True)


class DecodeChart(TimingChart):
    def draw(self, timeline: Timeline) -> None:
        gaps = timeline.token_gaps()
        draw_chart(self, "Decode ms per token", "decoded tokens, whole session",
                   [Series("line", [g.seq for g in gaps], [g.gap_ms for g in gaps], LINE)])


class ReuseChart(TimingChart):
    def draw(self, timeline: Timeline) -> None:
        # only checked turns: before its check a turn has no reuse to show
        records = [r for r in timeline.records() if r.check is not None]
        # Drawn as the total with the reused part over it: plotext's stacked_bar leaves a
        # blank cell at the foot of a bar whose first layer is 0.
        reused = [r for r in records if r.reused]
        draw_chart(self, "Tokens per turn: reused + computed", "turn", [
            Series("bars", [r.turn for r in records], [r.reused + r.computed for r in records], INPUT, "computed"),
            Series("bars", [r.turn for r in reused], [r.reused for r in reused], REUSED, "reused"),
        ], headroom=1.3, turn_ticks=True)


class ResidentChart(TimingChart):
    def draw(self, timeline: Timeline) -> None:
        samples = timeline.resident
        draw_chart(self, "KV resident tokens", "seconds since the engine started",
                   [Series("line", [t / 1000.0 for t, _ in samples], [n for _, n in samples], REUSED)])


CHARTS: tuple[type[TimingChart], ...] = (PrefillSpeedChart, TTFTChart, DecodeChart, ReuseChart, ResidentChart)
