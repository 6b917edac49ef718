"""The timings screen's charts of an endpoint's requests, drawn from the timeline's
RequestSeries: what each request reused, what recomputing cost, how long it waited."""

from __future__ import annotations

from effctx_core.events.timeline import Timeline
from effctx_tui.widgets.timing_charts import LINE, MS, RECOMPUTED, Axis, Note, Series, TimingChart

REQUEST = Axis("request", "request")
# One colour a conversation, in the order they began, again from the first past the last.
# Secondary last: in some themes (Textual's own) it hardly stands out from the canvas.
CONVERSATION_COLOURS = (LINE, "accent", "foreground", "secondary")


class HitRateChart(TimingChart):
    def draw(self, timeline: Timeline) -> None:
        requests = timeline.requests
        series = [
            Series("path", [p.number for p in points], [p.hit_rate * 100 for p in points],
                   CONVERSATION_COLOURS[i % len(CONVERSATION_COLOURS)], name or "completions")
            for i, (name, points) in enumerate(requests.conversations().items())
        ]
        notes = [Note(d.point.number, d.point.hit_rate * 100, f"#{d.point.number} {d.why}", RECOMPUTED)
                 for d in requests.drops()]
        self.replot("Cache hit rate per request", REQUEST, Axis("%"), series, top=100.0, notes=notes)


class RecomputeCostChart(TimingChart):
    def draw(self, timeline: Timeline) -> None:
        dropped = {d.point.number for d in timeline.requests.drops()}
        timed = [p for p in timeline.requests.points if p.ttft_ms is not None]
        series = [
            Series("dots", [p.computed for p in points], [p.ttft_ms or 0.0 for p in points], colour, label)
            for colour, label, points in (
                (LINE, "request", [p for p in timed if p.number not in dropped]),
                (RECOMPUTED, "drop", [p for p in timed if p.number in dropped]),
            )
        ]
        self.replot("TTFT against tokens computed", Axis("tokens", "computed"), MS, series, headroom=1.35)


class QueueWaitChart(TimingChart):
    def draw(self, timeline: Timeline) -> None:
        points = timeline.requests.points
        self.replot("Queue wait per request", REQUEST, MS,
                   [Series("bars", [p.number for p in points], [p.queue_ms for p in points], LINE)])


REQUEST_CHARTS: tuple[type[TimingChart], ...] = (HitRateChart, RecomputeCostChart, QueueWaitChart)
