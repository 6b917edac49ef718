"""A workload report as the terminal shows it: the turns beside the control, the totals,
and the TTFT-against-computed-tokens curve."""

from __future__ import annotations

import re
from typing import Sequence

import plotext
from rich.table import Table

from effctx_core.bench.workload_run import SLOWER_TOLERANCE, TurnRun, WorkloadReport
from effctx_core.units import format_count, format_rate

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _rate(tokens_per_s: float) -> str:
    """A decode rate in the table's tok/s column; "-" where none was measured (a turn of
    one token or none times no decode step)."""
    rate = format_rate(tokens_per_s)
    return "-" if rate is None else rate.removesuffix(" tok/s")


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


# A turn beside its control, up to their ratio: the columns `turn_table` and the console's
# benchmark screen share (name, justification); times in ms.
TURN_COLUMNS: tuple[tuple[str, str], ...] = (
    ("turn", "left"), ("kind", "left"), ("prompt", "right"), ("reused", "right"), ("computed", "right"),
    ("TTFT", "right"), ("ctl TTFT", "right"), ("wall", "right"), ("ctl wall", "right"), ("ctl/effctx", "right"))


def turn_cells(t: TurnRun) -> list[str]:
    """One turn's cells under `TURN_COLUMNS`."""
    c = t.control
    return [t.label, t.kind, format_count(t.prompt_tokens), format_count(t.reused), format_count(t.computed), _ms(t.ttft_ms),
            _ms(c.ttft_ms if c else None), _ms(t.wall_ms), _ms(c.wall_ms if c else None), _ratio(t.ratio)]


def turn_table_title(report: WorkloadReport) -> str:
    return (f"{report.workload} on {report.profile} ({report.backend}), times in ms · control (ctl): "
            f"{report.control_name or 'off'}")


def turn_table(report: WorkloadReport) -> Table:
    table = Table(title=turn_table_title(report), title_justify="left")
    for name, justify in (*TURN_COLUMNS, ("dec tok/s", "right"), ("check", "left")):
        table.add_column(name, justify=justify, no_wrap=name in ("turn", "kind"))  # type: ignore[arg-type]
    for t in report.turns:
        c = t.control
        checks = []
        if t.correct is not None:
            checks.append("answer ok" if t.correct else "answer WRONG")
        if c is not None and not c.same_reply:
            checks.append("other reply")
        if t.slower:
            checks.append("SLOWER")
        table.add_row(*turn_cells(t), _rate(t.decode_tps), ", ".join(checks))
    return table


def totals_table(reports: Sequence[WorkloadReport]) -> Table:
    table = Table(title="totals: mean TTFT in ms (wall per turn: mean wall ms); control/effctx above 1: effctx faster",
                  title_justify="left")
    table.add_column("profile")
    table.add_column("figure")
    for name in ("effctx", "control", "control/effctx"):
        table.add_column(name, justify="right")
    for report in reports:
        for figure, pair in report.totals().items():
            mine, theirs = pair["effctx"], pair["control"]
            if mine is None:
                continue
            table.add_row(report.profile, figure, _ms(mine), _ms(theirs),
                          _ratio(theirs / mine if theirs is not None and mine else None))
    return table


def summary_lines(report: WorkloadReport) -> list[str]:
    lines = []
    slower = [t.label for t in report.turns if t.slower]
    if report.control_name:
        lines.append(f"{report.profile}: effctx slower than the control (beyond {SLOWER_TOLERANCE:.0%}) on: "
                     f"{', '.join(slower)}" if slower else
                     f"{report.profile}: effctx no slower than the control on any turn")
    questions = report.questions
    if questions:
        lines.append(f"{report.profile}: {sum(bool(t.correct) for t in questions)} of {len(questions)} "
                     "questions answered correctly")
    if any(t.control is not None and not t.control.same_reply for t in report.turns):
        lines.append(f"{report.profile}: other reply: the control decoded other tokens than effctx on the same ids "
                     "(the runtime's logits depend slightly on how the prompt is split into batches)")
    lines.append(f"{report.profile}: token accounting " + ("agrees on every turn (reported = counted)"
                                                           if report.accounting_agrees else
                                                           "DIFFERS: " + "; ".join(report.accounting)))
    return lines


Series = tuple[list[int], list[float]]  # tokens computed, TTFT ms


def curve_series(report: WorkloadReport) -> tuple[Series, Series]:
    """`WorkloadReport.curve` as two series to plot: effctx on every turn, and the
    control on the turns it ran (empty without one)."""
    points = report.curve()
    control = [(p[0], p[2]) for p in points if p[2] is not None]
    return ([p[0] for p in points], [p[1] for p in points]), ([p[0] for p in control], [p[1] for p in control])


def curve_text(reports: Sequence[WorkloadReport], width: int = 80, height: int = 18, color: bool = True) -> str:
    """TTFT against the tokens each turn computed, effctx and control per profile;
    without `color`, plain text (for a file or a pipe)."""
    plotext.clear_figure()
    plotext.plotsize(width, height)
    plotext.theme("clear")
    for report in reports:
        (xs, ys), (control_xs, control_ys) = curve_series(report)
        plotext.scatter(xs, ys, label=f"{report.profile} effctx", marker="dot")
        if control_xs:
            plotext.scatter(control_xs, control_ys, label=f"{report.profile} control", marker="x")
    plotext.xlabel("tokens computed by effctx in the turn")
    plotext.ylabel("TTFT ms")
    plotext.title("time to first token against the suffix effctx computed")
    text = plotext.build()
    return text if color else _ANSI.sub("", text)
