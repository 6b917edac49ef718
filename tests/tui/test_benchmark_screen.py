"""The benchmark screen on the real default model: throughput beside quality, progress,
and Esc cancelling a run."""

from __future__ import annotations

from pilot_wait import wait_for
from textual import events
from textual.widgets import DataTable, ProgressBar, Static

from effctx_core.bench.cell import CellBenchPlan
from effctx_tui.app import EffctxApp
from effctx_tui.screens.benchmark import BenchmarkScreen

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
        assert all(float(v.replace(",", "")) > 0 for row in throughput for v in row[1:])
        ((depth, key, answer, verdict, _),) = cells(bench.query_one("#bench-quality", DataTable))
        assert (depth, verdict) == ("0.50", "found") and key in answer
        summary = str(bench.query_one("#bench-summary", Static).render())
        assert summary.startswith(f"{app.engine.profile.name}: prefill ") and summary.endswith("passkey 1/1 found at 384 tokens")
        assert app.engine.tape == ()  # the conversation was not touched


async def test_escape_cancels_a_running_benchmark_and_a_second_escape_goes_back(default_model):
    app = EffctxApp(checkpoints=None)
    app.bench_plan = CellBenchPlan(prompt_tokens=1024, decode_tokens=32, rounds=4)
    async with app.run_test(size=(120, 36)) as pilot:
        bench = await open_bench(pilot, app)
        await pilot.press("r")
        bar = bench.query_one("#bench-progress", ProgressBar)
        await wait_for(pilot, lambda: bar.progress >= 1, seconds=120)  # the warm-up is done, the rounds run
        app.post_message(events.Key("escape", None))
        await wait_for(pilot, lambda: not bench.running)
        assert str(bench.query_one("#bench-summary", Static).render()) == "benchmark cancelled"
        assert bench.query_one("#bench-throughput", DataTable).row_count == 0 and bench.report is None
        await pilot.press("escape")
        assert app.screen is app.session_screen
