"""The benchmark screen: the running cell's throughput with the passkey smoke beside it,
or a workload's turns beside the library's control with the TTFT curve, each run in a
worker on sessions of their own, with progress; Esc cancels."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.content import Content
from textual.message import Message
from textual.screen import Screen
from textual.theme import Theme
from textual.widgets import DataTable, Header, Label, ProgressBar, Static
from textual_plotext import PlotextPlot

from effctx_core.bench.cell import CellBenchPlan, CellBenchReport, run_cell_bench
from effctx_core.bench.measuring import measuring
from effctx_core.bench.workload_run import WorkloadReport, run_workload
from effctx_core.bench.workload_text import TURN_COLUMNS, curve_series, summary_lines, turn_cells, turn_table_title
from effctx_core.bench.workloads import load_workload
from effctx_core.cancel import CancelToken
from effctx_core.errors import Cancelled, EffctxError
from effctx_core.profiles import Profile
from effctx_core.units import format_count, format_ms, format_rate
from effctx_tui.themes import rich_style
from effctx_tui.widgets.footer import EffctxFooter
from effctx_tui.widgets.lists import ListTable

# Each title fits a 100-column screen; what its figures mean is in the note above them.
THROUGHPUT_TITLE = "Throughput (median of the rounds)"


def _figure(text: str | None) -> Text:
    """A figure of the tables, right-aligned; one that was not measured is a dash."""
    return Text(text or "-", justify="right")


def _ratio(value: float) -> Text:
    return _figure(f"{value:.3f}")


def _workload_title(workload: str) -> str:
    return f"Workload {workload}: each turn, effctx beside the library's control (ctl), in ms"


class BenchmarkScreen(Screen):
    BINDINGS = [
        Binding("r", "run", "Run", tooltip="Run the benchmark on the running cell"),
        Binding("w", "workload", "Workload", tooltip="Choose the next workload"),
        Binding("escape", "back", "Back / cancel", tooltip="Cancel the run under way, or back to the session"),
    ]
    DEFAULT_CSS = """
    BenchmarkScreen {
        #bench-note, #bench-summary { height: auto; padding: 0 1; }
        #bench-summary { margin-top: 1; text-style: bold; }
        #bench-note { background: $panel; }
        #bench-progress-row { height: 1; padding: 0 1; display: none; }
        #bench-progress-row.-running { display: block; }
        #bench-label { width: 1fr; }
        .bench-title { padding: 1 1 0 1; text-style: bold; }
        DataTable { height: auto; max-height: 50%; margin: 0 1; }
        #bench-curve { height: 1fr; min-height: 10; margin: 0 1; }
        .workload-part { display: none; }
        &.-workload .cell-part { display: none; }
        &.-workload .workload-part { display: block; }
    }
    """

    class Progress(Message):
        def __init__(self, message: str, done: int, total: int) -> None:
            super().__init__()
            self.message, self.done, self.total = message, done, total

    class Finished(Message):
        def __init__(self, report: CellBenchReport | None, error: str | None, cancelled: bool = False) -> None:
            super().__init__()
            self.report, self.error, self.cancelled = report, error, cancelled

    class WorkloadFinished(Message):
        def __init__(self, report: WorkloadReport | None, error: str | None, cancelled: bool = False) -> None:
            super().__init__()
            self.report, self.error, self.cancelled = report, error, cancelled

    def __init__(self, model_path: Path, profile: Profile, plan: CellBenchPlan,
                 is_busy: Callable[[], bool] = lambda: False, workload: str = "agent-loop") -> None:
        """`workload`: what `w` runs, a built-in workload's name or a .toml file's path."""
        super().__init__()
        self.model_path, self.profile, self.plan, self._is_busy = model_path, profile, plan, is_busy
        self.workload = workload
        self.report: CellBenchReport | None = None
        self.workload_report: WorkloadReport | None = None
        self._token: CancelToken | None = None
        self.title = "Benchmark"

    @property
    def running(self) -> bool:
        return self._token is not None

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Run and Workload are hidden while a measurement runs: one at a time."""
        return not (self.running and action in ("run", "workload"))

    def compose(self) -> ComposeResult:
        p = self.plan
        yield Header(show_clock=False)
        # One short line each, so that a 100-column screen wraps none of them.
        yield Static(
            f"The running cell ({self.profile.name}) on sessions of its own; the conversation is not touched.\n"
            f"r  throughput: a {format_count(p.prompt_tokens)}-token prompt, {format_count(p.decode_tokens)} decoded, "
            f"{p.rounds} rounds, the engine\n"
            f"   against the backend's direct loop and the library's API (ratios: median of per-round ratios;\n"
            f"   other load on the CPU moves them a few %); the passkey at {format_count(p.passkey_length(self.profile))} "
            f"tokens, depths {', '.join(str(d) for d in p.depths)}\n"
            f"w  workload {self.workload}: each turn beside the library's own control, with the TTFT curve",
            id="bench-note",
        )
        with Horizontal(id="bench-progress-row"):
            yield Label("", id="bench-label")
            yield ProgressBar(id="bench-progress", show_eta=False)
        yield Label(THROUGHPUT_TITLE, classes="bench-title cell-part")
        yield ListTable(id="bench-throughput", cursor_type="none", classes="cell-part")
        yield Label("Answer quality (passkey)", classes="bench-title cell-part")
        yield ListTable(id="bench-quality", cursor_type="none", classes="cell-part")
        yield Label(_workload_title(self.workload), id="bench-turns-title", classes="bench-title workload-part")
        yield ListTable(id="bench-turns", cursor_type="none", classes="workload-part")
        yield PlotextPlot(id="bench-curve", classes="workload-part")
        yield Static("", id="bench-summary")
        yield EffctxFooter()

    def on_mount(self) -> None:
        self.query_one("#bench-throughput", DataTable).add_columns("", "prefill", "decode")
        self.query_one("#bench-quality", DataTable).add_columns("depth", "key", "answer", "verdict", "TTFT")
        self.query_one("#bench-turns", DataTable).add_columns(
            *(Text(name, justify="right" if justify == "right" else "left") for name, justify in TURN_COLUMNS))
        plt = self.query_one("#bench-curve", PlotextPlot).plt
        plt.title("time to first token against the tokens effctx computed in the turn")
        plt.xlabel("tokens computed")
        plt.ylabel("TTFT ms")
        # The signal, not a watch on App.theme: it comes once the new theme's colours apply.
        self.app.theme_changed_signal.subscribe(self, self._restyle)

    def action_run(self) -> None:
        if self._is_busy():
            self.notify("A reply is still running; Esc on the session screen stops it.", severity="warning")
            return
        for table in self.query("DataTable.cell-part").results(DataTable):
            table.clear()
        self.remove_class("-workload")
        self.query_one("#bench-summary", Static).update("")
        self._token = CancelToken()
        self.refresh_bindings()
        self.query_one("#bench-progress-row").add_class("-running")
        self._show_progress("starting", 0, self.plan.steps)
        self._run(self._token)

    def action_workload(self) -> None:
        if self._is_busy():
            self.notify("A reply is still running; Esc on the session screen stops it.", severity="warning")
            return
        self.workload_report = None
        self.query_one("#bench-turns", DataTable).clear()
        self.query_one("#bench-turns-title", Label).update(_workload_title(self.workload))
        plot = self.query_one("#bench-curve", PlotextPlot)
        plot.plt.clear_data()
        plot.refresh()
        self.add_class("-workload")
        self.query_one("#bench-summary", Static).update("")
        self._token = CancelToken()
        self.refresh_bindings()
        self.query_one("#bench-progress-row").add_class("-running")
        self._show_progress("starting", 0, None)  # the steps are known once the workload is read
        self._run_workload(self._token)

    def action_back(self) -> None:
        if self._token is not None:
            self._token.cancel()
            self.query_one("#bench-label", Label).update("cancelling…")
        else:
            self.app.pop_screen()

    def _run(self, token: CancelToken) -> None:
        self._measure(lambda: run_cell_bench(self.model_path, self.profile, self.plan, progress=self._post_progress,
                                             cancel=token), self.Finished, f"console benchmark {self.profile.name}")

    def _run_workload(self, token: CancelToken) -> None:
        self._measure(lambda: run_workload(self.model_path, self.profile, load_workload(self.workload), control=True,
                                           progress=self._post_progress, cancel=token), self.WorkloadFinished,
                      f"console workload {self.workload} {self.profile.name}")

    @work(thread=True, exclusive=True, exit_on_error=False)
    def _measure(self, measure: Callable[[], Any], finished: Callable[..., Message], what: str) -> None:
        """Run `measure` off the app thread, registered as measuring `what` (so `effctx
        certify` does not count a timed stage it overlaps); its report, error or cancel
        comes back as `finished`."""
        try:
            with measuring(what):
                report = measure()
        except Cancelled as exc:
            self.post_message(finished(None, str(exc), cancelled=True))
        except EffctxError as exc:
            self.post_message(finished(None, str(exc)))
        else:
            self.post_message(finished(report, None))

    def _post_progress(self, message: str, done: int, total: int) -> None:
        self.post_message(self.Progress(message, done, total))

    def _show_progress(self, message: str, done: int, total: int | None) -> None:
        self.query_one("#bench-label", Label).update(message)
        self.query_one("#bench-progress", ProgressBar).update(total=total, progress=done)

    def on_benchmark_screen_progress(self, message: Progress) -> None:
        if self._token is not None and not self._token.cancelled:
            self._show_progress(message.message, message.done, message.total)

    def _ended(self, message: Finished | WorkloadFinished) -> Static | None:
        """A run ended: the progress row goes; the summary line, unless it failed or was
        cancelled, which the summary then says."""
        self._token = None
        self.refresh_bindings()
        self.query_one("#bench-progress-row").remove_class("-running")
        summary = self.query_one("#bench-summary", Static)
        if message.report is None:
            summary.update(Content.styled(message.error or "", "" if message.cancelled else "$error"))
            return None
        return summary

    def on_benchmark_screen_finished(self, message: Finished) -> None:
        summary = self._ended(message)
        if summary is None or message.report is None:
            return
        self.report = report = message.report
        t = report.throughput.to_dict()
        rows = self.query_one("#bench-throughput", DataTable)
        for name, key in (("direct (raw loop)", "raw"), ("library API", "library"), ("engine", "engine")):
            rows.add_row(name, _figure(format_rate(t[key]["prefill_tps"])), _figure(format_rate(t[key]["decode_tps"])))
        rows.add_row("engine / direct", _ratio(t["prefill_ratio"]), _ratio(t["decode_ratio"]))
        rows.add_row("engine / library", _ratio(t["library_prefill_ratio"]), _ratio(t["library_decode_ratio"]))
        self._show_quality(report)
        summary.update(report.summary())

    def _show_quality(self, report: CellBenchReport) -> None:
        quality = self.query_one("#bench-quality", DataTable)
        quality.clear()
        wrong = rich_style(quality, "$error bold")
        for trial in report.trials:
            verdict = Text(trial.verdict, style="" if trial.correct else wrong)
            quality.add_row(f"{trial.depth:.2f}", trial.key, trial.answer[:40], verdict, _figure(None if trial.ttft_ms is None else format_ms(trial.ttft_ms)))

    def _restyle(self, _theme: Theme) -> None:
        # the table's cells hold the colours of the theme they were drawn in
        if self.report is not None:
            self._show_quality(self.report)

    def on_benchmark_screen_workload_finished(self, message: WorkloadFinished) -> None:
        summary = self._ended(message)
        if summary is None or message.report is None:
            return
        self.workload_report = report = message.report
        self.query_one("#bench-turns-title", Label).update(turn_table_title(report))
        turns = self.query_one("#bench-turns", DataTable)
        for turn in report.turns:
            turns.add_row(*(Text(cell, justify="right" if justify == "right" else "left")
                            for cell, (_, justify) in zip(turn_cells(turn), TURN_COLUMNS)))
        plot = self.query_one("#bench-curve", PlotextPlot)
        (xs, ys), (control_xs, control_ys) = curve_series(report)
        # Rendering the empty plot fixed its limits at -1..1, which would leave every point
        # outside it (and plotext failing on the legend); clearing the data resets them.
        plot.plt.clear_data()
        plot.plt.scatter(xs, ys, label="effctx", marker="dot")
        if control_xs:
            plot.plt.scatter(control_xs, control_ys, label=f"control: {report.control_name}", marker="x")
        plot.refresh()
        summary.update("\n".join(summary_lines(report)))

    def on_unmount(self) -> None:
        if self._token is not None:
            self._token.cancel()  # the screen is gone: nobody would see the result
