"""The timings screen's charts: one PlotextPlot each, redrawn from a Timeline.

Every chart clears and replots its whole series: a session has at most thousands of
points, which plotext draws in a few milliseconds, so no incremental bookkeeping.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal, Sequence

from textual.app import RenderResult
from textual.color import Color
from textual_plotext import PlotextPlot

from effctx_core.events.timeline import Timeline
from effctx_core.units import format_count

# The same colour for the same meaning on every chart: the theme's variable, as the
# console's text uses it (reused is $success in the timings table and the status line).
INPUT, RECOMPUTED, REUSED, LINE = "warning", "error", "success", "primary"

# The same look for the same kind of series on every chart: plotext's call and options.
KINDS: dict[str, tuple[str, dict[str, Any]]] = {
    "dots": ("scatter", {"marker": "dot"}),
    "bars": ("bar", {"width": 0.5}),
    "line": ("plot", {"marker": "braille"}),
    # a few points joined: thick enough that two paths' colours tell apart
    "path": ("plot", {"marker": "hd"}),
}


@dataclass(frozen=True)
class Series:
    kind: Literal["dots", "bars", "line", "path"]
    x: list[float]
    y: list[float]
    colour: str  # a theme variable's name
    label: str | None = None


@dataclass(frozen=True)
class Note:
    """A marked point: a ● at (x, y) and a text beside it, on the side away from the
    nearer edge of the plot (plotext cuts a text at the frame)."""

    x: float
    y: float
    text: str
    colour: str  # a theme variable's name


@dataclass(frozen=True)
class Axis:
    """What an axis measures and in which unit: "tokens", "turn", "request" and "%" are
    whole numbers, "ms" is shown in ms or, when its values reach a second, in s. A y axis
    has no title: the chart's title says what it measures."""

    unit: Literal["tokens", "turn", "request", "%", "tok/s", "ms"]
    title: str = ""

    @property
    def whole(self) -> bool:
        return self.unit in ("tokens", "turn", "request", "%")

    def scale(self, largest: float) -> tuple[str, float]:
        """The unit printed and the factor of the values to it."""
        if self.unit == "ms" and largest >= 1000:
            return "s", 1000.0
        return self.unit, 1.0

    def label(self, largest: float) -> str:
        unit, _ = self.scale(largest)
        # a count of turns or requests is its own unit
        return self.title if unit in ("turn", "request") else f"{self.title} ({unit})"


def ticks(lo: float, hi: float, whole: bool, most: int = 5) -> tuple[list[float], float]:
    """Round tick values (1, 2, 2.5 or 5 times a power of ten apart) from lo to hi, at most
    about `most` of them, and their step; `whole` keeps the step a whole number."""
    span = hi - lo or abs(hi) or 1.0
    power = 10.0 ** math.floor(math.log10(span / most))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= span / most)
    if whole:
        step = float(max(1, round(step)))
    first = math.ceil(lo / step - 1e-9) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)], step


def tick_labels(values: list[float], step: float) -> list[str]:
    """As many decimals as the step needs: 0.5 steps print 0.5, 1.0; 2.5 steps 2.5, 5.0;
    500 steps 1,000."""
    decimals = next(d for d in range(10) if abs(round(step, d) - step) < step * 1e-6)
    return [format_count(v) if decimals == 0 else f"{v:,.{decimals}f}" for v in values]


def _set_ticks(plt, axis: Axis, lo: float, hi: float, which: Literal["x", "y"], most: int) -> None:
    _, factor = axis.scale(hi)
    values, step = ticks(lo / factor, hi / factor, axis.whole, most)
    set_ticks = plt.xticks if which == "x" else plt.yticks
    set_ticks([v * factor for v in values], tick_labels(values, step))


class TimingChart(PlotextPlot):
    """A chart of the timings screen: `draw` replots it from a Timeline."""

    # Rows of the widget that are not the plot's canvas: title, frame top and bottom,
    # x ticks, x label.
    FRAME_ROWS = 5
    # Columns that are not the canvas: the y tick labels and the frame's sides.
    FRAME_COLUMNS = 8
    # the axes and their ranges, once there is data
    _axes: tuple[Axis, float, float, Axis, float] | None = None

    def draw(self, timeline: Timeline) -> None:
        raise NotImplementedError

    def replot(self, title: str, x: Axis, y: Axis, series: list[Series], *, headroom: float = 1.0,
               top: float | None = None, notes: Sequence[Note] = ()) -> None:
        """Replot `series` in order, leaving out empty ones, and write `notes` over them.
        The y axis starts at 0 and ends at `top` (a measure's bound, such as 100%) or at
        `headroom` times the largest value (room for the legend); both axes have round
        ticks in their unit, and the title says the y unit."""
        shown = [s for s in series if s.x]
        plt = self.plt
        plt.clear_data()
        top = top or max((v for s in shown for v in s.y), default=0.0) * headroom or 1.0
        plt.title(f"{title} ({y.scale(top)[0]})" + ("" if shown else " · no data yet"))
        xs = [v for s in shown for v in s.x]
        plt.xlabel(x.label(max(xs, default=0.0)))
        theme = self.app.theme_variables
        for s in shown:
            method, options = KINDS[s.kind]
            getattr(plt, method)(s.x, s.y, color=Color.parse(theme[s.colour]).rgb, label=s.label, **options)
        middle = (min(xs, default=0.0) + max(xs, default=0.0)) / 2
        for note in notes:
            left = note.x <= middle
            # On the canvas's own colour: plotext's default is its theme's from before
            # textual-plotext applied the app's, at render.
            plt.text(f"● {note.text}" if left else f"{note.text} ●", note.x, note.y,
                     color=Color.parse(theme[note.colour]).rgb, background=Color.parse(theme["surface"]).rgb,
                     alignment="left" if left else "right")
        self._axes = (x, min(xs), max(xs), y, top) if shown else None
        if shown:
            plt.ylim(0, top)
        self.refresh()

    def render(self) -> RenderResult:
        # The ticks are set where the size is known: no more than its rows and columns
        # can hold apart.
        if self._axes is not None:
            x, lo, hi, y, top = self._axes
            _set_ticks(self.plt, y, 0, top, "y", most=max(2, (self.size.height - self.FRAME_ROWS) // 2))
            # labels that overlap are drawn over one another in an order that changes from
            # run to run: as many as fit side by side, with a gap (and room for decimals)
            label = len(format_count(hi / x.scale(hi)[1])) + (2 if x.whole else 4)
            _set_ticks(self.plt, x, lo, hi, "x", most=max(2, (self.size.width - self.FRAME_COLUMNS) // label))
        return super().render()


TURN = Axis("turn", "turn")
TOKENS, MS = Axis("tokens"), Axis("ms")


class PrefillSpeedChart(TimingChart):
    def draw(self, timeline: Timeline) -> None:
        measured = [(c.stage, c.end, tps) for c in timeline.chunks() if (tps := c.tps) is not None]
        series = []
        for stage, colour, label in (("prefill", INPUT, "new prompt"), ("prefix", RECOMPUTED, "earlier tape, recomputed")):
            points = [(end, tps) for kind, end, tps in measured if kind == stage]
            series.append(Series("dots", [end for end, _ in points], [tps for _, tps in points], colour, label))
        self.replot("Prefill speed", Axis("tokens", "cache position"), Axis("tok/s"), series, headroom=1.35)


class TTFTChart(TimingChart):
    def draw(self, timeline: Timeline) -> None:
        ttft = timeline.ttft()
        self.replot("Time to first token", TURN, MS,
                   [Series("bars", [t for t, _ in ttft], [ms for _, ms in ttft], LINE)])


class DecodeChart(TimingChart):
    def draw(self, timeline: Timeline) -> None:
        gaps = timeline.token_gaps()
        self.replot("Decode time per token", Axis("tokens", "decoded so far"), MS,
                   [Series("line", [g.seq for g in gaps], [g.gap_ms for g in gaps], LINE)])


class ReuseChart(TimingChart):
    def draw(self, timeline: Timeline) -> None:
        # only checked turns: before its check a turn has no reuse to show
        records = [r for r in timeline.records() if r.check is not None]
        # Drawn as the total with the reused part over it: plotext's stacked_bar leaves a
        # blank cell at the foot of a bar whose first layer is 0.
        reused = [r for r in records if r.reused]
        self.replot("Reuse per turn", TURN, TOKENS, [
            Series("bars", [r.turn for r in records], [r.reused + r.computed for r in records], INPUT, "computed"),
            Series("bars", [r.turn for r in reused], [r.reused for r in reused], REUSED, "reused"),
        ], headroom=1.3)


class ResidentChart(TimingChart):
    def draw(self, timeline: Timeline) -> None:
        samples = timeline.resident
        self.replot("KV resident", Axis("ms", "since the engine started"), TOKENS,
                   [Series("line", [t for t, _ in samples], [n for _, n in samples], REUSED)])


CHARTS: tuple[type[TimingChart], ...] = (PrefillSpeedChart, TTFTChart, DecodeChart, ReuseChart, ResidentChart)
