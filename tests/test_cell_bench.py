"""The console's cell benchmark on the default model: throughput beside passkey quality,
with progress and cancellation."""

from __future__ import annotations

import pytest

from effctx_core.bench.cell import CellBenchPlan, run_cell_bench
from effctx_core.bench.smoke import run_passkey
from effctx_core.cancel import CancelToken
from effctx_core.engine import SessionEngine
from effctx_core.errors import Cancelled
from effctx_core.profiles import DEFAULT_PROFILE

PLAN = CellBenchPlan(prompt_tokens=128, decode_tokens=8, rounds=1, passkey_tokens=384, depths=(0.5,))


def test_a_cell_bench_reports_throughput_and_passkey_with_progress_per_step(default_model):
    steps = []
    report = run_cell_bench(default_model, DEFAULT_PROFILE, PLAN, progress=lambda m, d, t: steps.append((m, d, t)))
    assert [(d, t) for _, d, t in steps] == [(0, 3), (1, 3), (2, 3), (3, 3)]
    assert [m.split(":")[0] for m, _, _ in steps] == ["throughput", "throughput", "passkey smoke", "done"]
    assert report.throughput.rounds == 1 and len(report.throughput.raw) == len(report.throughput.engine) == 1
    assert report.throughput.prompt_tokens >= 100 and report.throughput.decode_tokens == 8
    (trial,) = report.trials
    assert (trial.length, trial.depth, trial.correct, trial.needle_resident) == (384, 0.5, True, True)
    assert report.summary().endswith("passkey 1/1 found at 384 tokens")


def test_cancelling_during_the_smoke_raises_cancelled(default_model):
    token = CancelToken()

    def cancel_at_the_smoke(message: str, done: int, total: int) -> None:
        if message.startswith("passkey smoke"):
            token.cancel()

    with pytest.raises(Cancelled, match="^smoke cancelled$"):
        run_cell_bench(default_model, DEFAULT_PROFILE, PLAN, progress=cancel_at_the_smoke, cancel=token)


def test_cancelling_during_the_throughput_rounds_raises_cancelled(default_model):
    token = CancelToken()
    with pytest.raises(Cancelled, match="^benchmark cancelled$"):
        run_cell_bench(default_model, DEFAULT_PROFILE, PLAN, progress=lambda m, d, t: token.cancel(), cancel=token)


def test_the_smoke_is_cut_to_what_a_non_evicting_profile_holds():
    small = DEFAULT_PROFILE.with_changes(n_ctx=512)
    assert CellBenchPlan(passkey_tokens=1024).passkey_length(small) == 512 - 16 - 64


def test_a_cancel_stops_a_running_passkey_prefill_through_the_engine(default_model):
    engine = SessionEngine(default_model, DEFAULT_PROFILE)
    engine.open()
    token = CancelToken()
    finished = []

    def watch(event) -> None:
        if event.kind == "prefill_chunk":
            token.cancel()
        elif event.kind == "turn_finished":
            finished.append((event.result.stop_reason, event.result.prefilled))

    engine.subscribe(watch)
    try:
        with pytest.raises(Cancelled, match="^smoke cancelled$"):
            run_passkey(engine, [1024], [0.5], 1, cancel=token)
    finally:
        engine.close()
    assert finished == [("cancelled", 512)]
