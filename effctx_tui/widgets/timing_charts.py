"""The timings screen's charts: one PlotextPlot each, redrawn from a Timeline.

Every chart clears and replots its whole series: a session has at most thousands of
points, which plotext draws in a few milliseconds, so no incremental bookkeeping.
"""

from __future__ import annotations

from textual_plotext import PlotextPlot

from effctx_core.timeline import Timeline

# The same colour for the same meaning on every chart.
INPUT, RECOMPUTED, REUSED, LINE = "orange", "red", "green", "cyan"


def _start(plot: PlotextPlot, title: str, empty: bool) -> None:
    plt = plot.plt
    plt.clear_data()
    plt.title(title + (" · no data yet" if empty else ""))


def _turn_ticks(plt, turns: list[int]) -> None:
    # one tick per turn, but not so many that the labels run into each other
    step = max(1, len(turns) // 12)
    plt.xticks(turns[::step], [str(t) for t in turns[::step]])


class PrefillSpeedChart(PlotextPlot):
    def draw(self, timeline: Timeline) -> None:
        chunks = timeline.chunks()
        _start(self, "Prefill tok/s per chunk, by position", not chunks)
        plt = self.plt
        plt.xlabel("cache position (end of chunk)")
        for stage, colour, label in (("prefill", INPUT, "input"), ("prefix", RECOMPUTED, "earlier tape")):
            points = [c for c in chunks if c.stage == stage]
            if points:
                plt.scatter([c.end for c in points], [c.tps for c in points], color=colour, label=label, marker="dot")
        if chunks:
            plt.ylim(0, max(c.tps for c in chunks) * 1.35 or 1)  # from 0, with headroom for the legend
        self.refresh()


class TTFTChart(PlotextPlot):
    def draw(self, timeline: Timeline) -> None:
        ttft = timeline.ttft()
        _start(self, "TTFT per turn (ms)", not ttft)
        plt = self.plt
        plt.xlabel("turn")
        if ttft:
            turns = [t for t, _ in ttft]
            plt.bar(turns, [ms for _, ms in ttft], color=LINE, width=0.5)
            _turn_ticks(plt, turns)
        self.refresh()


class DecodeChart(PlotextPlot):
    def draw(self, timeline: Timeline) -> None:
        gaps = timeline.token_gaps()
        _start(self, "Decode ms per token", not gaps)
        plt = self.plt
        plt.xlabel("decoded tokens, whole session")
        if gaps:
            plt.plot([g.seq for g in gaps], [g.gap_ms for g in gaps], color=LINE, marker="braille")
        self.refresh()


class ReuseChart(PlotextPlot):
    def draw(self, timeline: Timeline) -> None:
        # only checked turns: before its check a turn has no reuse to show
        records = [r for r in timeline.records() if r.check is not None]
        _start(self, "Tokens per turn: reused + computed", not records)
        plt = self.plt
        plt.xlabel("turn")
        if records:
            # Drawn as the total with the reused part over it: plotext's stacked_bar
            # leaves a blank cell at the foot of a bar whose first layer is 0.
            turns = [r.turn for r in records]
            totals = [r.reused + r.computed for r in records]
            plt.bar(turns, totals, color=INPUT, width=0.5, label="computed")
            reused = [(r.turn, r.reused) for r in records if r.reused]
            if reused:
                plt.bar([t for t, _ in reused], [n for _, n in reused], color=REUSED, width=0.5, label="reused")
            plt.ylim(0, max(totals) * 1.3 or 1)  # headroom for the legend
            _turn_ticks(plt, turns)
        self.refresh()


class ResidentChart(PlotextPlot):
    def draw(self, timeline: Timeline) -> None:
        samples = timeline.resident
        _start(self, "KV resident tokens", not samples)
        plt = self.plt
        plt.xlabel("seconds since the engine started")
        if samples:
            plt.plot([t / 1000.0 for t, _ in samples], [n for _, n in samples], color=REUSED, marker="braille")
        self.refresh()


CHARTS = (PrefillSpeedChart, TTFTChart, DecodeChart, ReuseChart, ResidentChart)
