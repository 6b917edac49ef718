"""The benchmark screen on the real default model: throughput beside quality, a workload's
turns beside the library's control with the TTFT curve, progress, and Esc cancelling a run."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

import pytest
from textual import events
from textual.app import App
from textual.widgets import DataTable, Label, ProgressBar, Static
from textual_plotext import PlotextPlot

from effctx_core.bench.cell import CellBenchPlan, CellBenchReport, run_cell_bench
from effctx_core.bench.overhead import OverheadReport, Rates
from effctx_core.bench.smoke import PasskeyTrial
from effctx_core.bench.workload_text import turn_cells
from effctx_core.profiles import DEFAULT_PROFILE
from effctx_tui.app import EffctxApp
from effctx_tui.screens import benchmark as benchmark_screen
from effctx_tui.screens.benchmark import BenchmarkScreen
from tests.helpers.gate import Gate
from tests.helpers.pilot_wait import wait_for
from tests.helpers.small_workload import write_small_workload

SMALL = CellBenchPlan(prompt_tokens=128, decode_tokens=8, rounds=1, passkey_tokens=384, depths=(0.5,))


def cells(table: DataTable) -> list[list[str]]:
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


async def open_bench(pilot, app: EffctxApp) -> BenchmarkScreen:
    await wait_for(pilot, lambda: app.session_screen.ready)
    await pilot.press("ctrl+b")
    bench = app.screen
    assert isinstance(bench, BenchmarkScreen)
    # mounted, so its keys are live (a key pressed before lands on the screen below)
    await wait_for(pilot, lambda: bench.query_one("#bench-throughput", DataTable).columns)
    return bench


async def open_workload_bench(pilot, app: EffctxApp, workload: str) -> BenchmarkScreen:
    """The screen as Ctrl+B opens it, with `w` running `workload` (a .toml file's path)."""
    await wait_for(pilot, lambda: app.session_screen.ready)
    engine = app.engine
    bench = BenchmarkScreen(engine.model_path, engine.profile, app.bench_plan, is_busy=lambda: app.session_screen.busy,
                            workload=workload)
    await app.push_screen(bench)
    await wait_for(pilot, lambda: bench.query_one("#bench-turns", DataTable).columns)
    return bench


def series(plot: PlotextPlot) -> list[tuple[str, list, list]]:
    """What the plot was given: (label, xs, ys) per series."""
    monitor = plot.plt.monitor
    return list(zip(monitor.label, monitor.x, monitor.y))


async def test_a_run_fills_throughput_and_passkey_quality_side_by_side(default_model):
    app = EffctxApp(checkpoints=None)
    app.bench_plan = SMALL
    async with app.run_test(size=(120, 36)) as pilot:
        bench = await open_bench(pilot, app)
        await pilot.press("r")  # Pilot may wait through the whole (short) run here
        await wait_for(pilot, lambda: bench.report is not None, seconds=120)
        bar = bench.query_one("#bench-progress", ProgressBar)
        assert not bench.running and (bar.total, bar.progress) == (3, 3)
        throughput = cells(bench.query_one("#bench-throughput", DataTable))
        assert [row[0] for row in throughput] == ["direct (raw loop)", "library API", "engine",
                                                "engine / direct", "engine / library"]
        rates, ratios = throughput[:3], throughput[3:]
        assert all(re.fullmatch(r"[\d,.]+ tok/s", v) for row in rates for v in row[1:])
        assert all(float(v) > 0 for row in ratios for v in row[1:])
        ((depth, key, answer, verdict, _),) = cells(bench.query_one("#bench-quality", DataTable))
        assert (depth, verdict) == ("0.50", "found") and key in answer
        summary = str(bench.query_one("#bench-summary", Static).render())
        assert summary.startswith(f"{app.engine.profile.name}: prefill ") and summary.endswith("passkey 1/1 found at 384 tokens")
        assert app.engine.tape == ()  # the conversation was not touched


def held_before_the_rounds(gate: Gate) -> Callable[..., CellBenchReport]:
    """run_cell_bench, held by `gate` once its warm-up is done and the rounds are next."""
    def run(model_path, profile, plan, progress, cancel) -> CellBenchReport:
        def report(message: str, done: int, total: int) -> None:
            progress(message, done, total)
            if done == 1:
                gate.hold()
        return run_cell_bench(model_path, profile, plan, progress=report, cancel=cancel)
    return run


async def test_escape_cancels_a_running_benchmark_and_a_second_escape_goes_back(default_model, gate, monkeypatch):
    # Held between the warm-up and the rounds, the run is still under way when Esc
    # arrives, however short the plan.
    monkeypatch.setattr(benchmark_screen, "run_cell_bench", held_before_the_rounds(gate))
    app = EffctxApp(checkpoints=None)
    app.bench_plan = SMALL
    async with app.run_test(size=(120, 36)) as pilot:
        bench = await open_bench(pilot, app)
        await pilot.press("r")
        await wait_for(pilot, gate.reached.is_set, seconds=120)
        await pilot.press("escape")
        assert bench.running
        gate.release()
        await wait_for(pilot, lambda: not bench.running)
        assert str(bench.query_one("#bench-summary", Static).render()) == "benchmark cancelled"
        assert bench.query_one("#bench-throughput", DataTable).row_count == 0 and bench.report is None
        await pilot.press("escape")
        assert app.screen is app.session_screen


async def ran_workload(pilot, app: EffctxApp, folder: Path) -> BenchmarkScreen:
    """The screen after `w` ran the small workload to the end."""
    bench = await open_workload_bench(pilot, app, str(write_small_workload(folder)))
    await pilot.press("w")
    await wait_for(pilot, lambda: bench.workload_report is not None, seconds=300)
    return bench


async def test_a_workload_run_fills_the_turn_table_one_row_per_turn(default_model, tmp_path):
    app = EffctxApp(checkpoints=None)
    async with app.run_test(size=(120, 40)) as pilot:
        bench = await ran_workload(pilot, app, tmp_path)
        bar = bench.query_one("#bench-progress", ProgressBar)
        assert not bench.running and (bar.total, bar.progress) == (5, 5)
        table = bench.query_one("#bench-turns", DataTable)
        assert [str(c.label) for c in table.columns.values()] == [
            "turn", "kind", "prompt", "reused", "computed", "TTFT", "ctl TTFT", "wall", "ctl wall", "ctl/effctx"]
        rows = cells(table)
        assert [row[:2] for row in rows] == [
            ["turn 1", "cold"], ["turn 2", "suffix"], ["turn 3 (prefix edited)", "edit"], ["read-first 1", "branch"],
            ["turn 1, new process", "second-process"]]
        assert rows == [turn_cells(t) for t in bench.workload_report.turns]
        assert all(row[6] != "-" and row[9].endswith("x") for row in rows)  # every turn beside the control
        assert bench.query_one("#bench-throughput", DataTable).display is False  # the workload's area is shown
        assert app.engine.tape == ()  # the conversation was not touched


async def test_a_workload_run_plots_ttft_against_computed_tokens_for_effctx_and_the_control(default_model, tmp_path):
    app = EffctxApp(checkpoints=None)
    async with app.run_test(size=(120, 40)) as pilot:
        bench = await ran_workload(pilot, app, tmp_path)
        plot = bench.query_one("#bench-curve", PlotextPlot)
        assert plot.display and plot.size.height >= 10
        points = bench.workload_report.curve()
        assert len(points) == 5
        assert series(plot) == [
            ("effctx", [p[0] for p in points], [p[1] for p in points]),
            ("control: Llama.create_completion (llama-cpp-python)", [p[0] for p in points], [p[2] for p in points]),
        ]
        assert (plot.plt.monitor.xlabel[0], plot.plt.monitor.ylabel[0]) == ("tokens computed", "TTFT ms")


async def test_escape_cancels_a_running_workload(default_model, tmp_path):
    app = EffctxApp(checkpoints=None)
    async with app.run_test(size=(120, 40)) as pilot:
        bench = await open_workload_bench(pilot, app, str(write_small_workload(tmp_path)))
        await pilot.press("w")
        bar = bench.query_one("#bench-progress", ProgressBar)
        await wait_for(pilot, lambda: bar.progress >= 1, seconds=300)  # the first turn is done, the second runs
        app.post_message(events.Key("escape", None))
        await wait_for(pilot, lambda: not bench.running, seconds=120)
        assert str(bench.query_one("#bench-summary", Static).render()) == "benchmark cancelled"
        assert bench.query_one("#bench-turns", DataTable).row_count == 0 and bench.workload_report is None
        assert series(bench.query_one("#bench-curve", PlotextPlot)) == []


async def test_r_while_a_workload_runs_does_nothing(default_model, tmp_path):
    app = EffctxApp(checkpoints=None)
    app.bench_plan = SMALL
    async with app.run_test(size=(120, 40)) as pilot:
        bench = await open_workload_bench(pilot, app, str(write_small_workload(tmp_path)))
        await pilot.press("w")
        bar = bench.query_one("#bench-progress", ProgressBar)
        await wait_for(pilot, lambda: bar.progress >= 1, seconds=300)
        token = bench._token
        app.post_message(events.Key("r", "r"))
        app.post_message(events.Key("escape", None))
        await wait_for(pilot, lambda: not bench.running, seconds=120)
        assert token.cancelled and bench.report is None and bench.has_class("-workload")
        assert str(bench.query_one("#bench-summary", Static).render()) == "benchmark cancelled"


# ---------------------------------------------------------------------- layout, no model

def finished_report() -> CellBenchReport:
    """A cell benchmark's report as a run of the default profile gives it, with fixed figures."""
    rates = lambda prefill, decode: [Rates(prefill, decode), Rates(prefill * 1.02, decode * 0.99)]  # noqa: E731
    throughput = OverheadReport(512, 64, 2, raw=rates(1812.4, 96.1), engine=rates(1790.2, 95.3),
                                library=rates(1655.0, 93.8))
    trials = [PasskeyTrial(1024, depth, 7, "48213", 1024, 100, 112, answer, answer.startswith(" 48213"),
                           answer.startswith(" 48213"), True, 0, ttft)
              for depth, answer, ttft in ((0.1, " 48213. The grass is green.", 412.0),
                                          (0.5, " 48213.", 398.6), (0.9, " The sky is blue.", 405.1))]
    return CellBenchReport(DEFAULT_PROFILE.name, throughput, trials)


class BenchApp(App):
    """The benchmark screen of the default profile, on a model it never opens."""

    def __init__(self, report: CellBenchReport | None = None) -> None:
        super().__init__()
        self.report = report

    def on_mount(self) -> None:
        screen = BenchmarkScreen(Path("model.gguf"), DEFAULT_PROFILE, CellBenchPlan())
        self.push_screen(screen)
        if self.report is not None:
            screen.post_message(BenchmarkScreen.Finished(self.report, None))


async def test_at_100_columns_the_note_and_the_titles_are_whole_lines():
    app = BenchApp()
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        note = app.screen.query_one("#bench-note", Static)
        assert str(note.render()).splitlines() == [
            "The running cell (exact) on sessions of its own; the conversation is not touched.",
            "r  throughput: a 512-token prompt, 64 decoded, 4 rounds, the engine",
            "   against the backend's direct loop and the library's API (ratios: median of per-round ratios;",
            "   other load on the CPU moves them a few %); the passkey at 1,024 tokens, depths 0.1, 0.5, 0.9",
            "w  workload agent-loop: each turn beside the library's own control, with the TTFT curve",
        ]
        assert note.size.height == 5  # none of them wraps
        titles = list(app.screen.query(".bench-title").results(Label))
        assert [str(t.render()) for t in titles] == [
            "Throughput (median of the rounds)", "Answer quality (passkey)",
            "Workload agent-loop: each turn, effctx beside the library's control (ctl), in ms"]
        # each on one line (below the padding's) within the screen, in either part
        one_line = lambda t: t.region.right <= 100 and t.region.height == 2  # noqa: E731
        assert [one_line(t) for t in titles] == [True, True, False]  # the workload's part is hidden
        app.screen.add_class("-workload")  # as `w` shows it
        await pilot.pause()
        assert [one_line(t) for t in titles] == [False, False, True]


@pytest.mark.parametrize("size", [(100, 30), (160, 48)], ids=["100x30", "160x48"])
def test_snapshot_a_finished_cell_benchmark(snap_compare, size):
    assert snap_compare(BenchApp(finished_report()), terminal_size=size, run_before=lambda pilot: pilot.pause(0.3))
