"""The console's benchmark of one cell: throughput and the passkey smoke, side by side.

Both run on sessions of their own with the cell's profile, so the conversation in the
console is not touched; no throughput figure is shown without the answer-quality one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from effctx_core.bench.overhead import OverheadReport, run_overhead
from effctx_core.bench.smoke import ANSWER_TOKENS, PasskeyTrial, run_passkey
from effctx_core.cancel import CancelToken
from effctx_core.engine import SessionEngine
from effctx_core.profiles import Profile
from effctx_core.residency.config import policy_evicts
from effctx_core.units import format_count, format_rate

ProgressFn = Callable[[str, int, int], None]  # message, steps done, steps


@dataclass(frozen=True)
class CellBenchPlan:
    # Four rounds of 64 decoded tokens: with two rounds of 32 the decode ratio wandered
    # by ±10% between runs on 2 CPU cores; a full run there takes about 25 s.
    prompt_tokens: int = 512
    decode_tokens: int = 64
    rounds: int = 4
    passkey_tokens: int = 1024
    depths: tuple[float, ...] = (0.1, 0.5, 0.9)

    @property
    def steps(self) -> int:
        return self.rounds + 1 + len(self.depths)  # warm-up, rounds, one trial per depth

    def passkey_length(self, profile: Profile) -> int:
        """The smoke's prompt length: the plan's, cut to what the profile can hold when it
        does not evict (an evicting profile is meant to be asked beyond its window)."""
        if policy_evicts(profile.residency):
            return self.passkey_tokens
        return min(self.passkey_tokens, profile.n_ctx - ANSWER_TOKENS - 64)


@dataclass(frozen=True)
class CellBenchReport:
    profile: str
    throughput: OverheadReport
    trials: list[PasskeyTrial] = field(default_factory=list)

    @property
    def found(self) -> int:
        return sum(t.correct for t in self.trials)

    def to_dict(self) -> dict:
        return {
            "profile": self.profile,
            "throughput": self.throughput.to_dict(),
            "passkey": {"found": self.found, "trials_run": len(self.trials), "trials": [t.to_dict() for t in self.trials]},
            "summary": self.summary(),
        }

    def summary(self) -> str:
        t = self.throughput
        engine = t.to_dict()["engine"]
        length = self.trials[0].length if self.trials else 0
        rates = [f"{name} {rate}" for name in ("prefill", "decode") if (rate := format_rate(engine[f"{name}_tps"]))]
        return (f"{self.profile}: {', '.join(rates) or 'no rate measured'} "
                f"(engine/direct {t.prefill_ratio:.3f} / {t.decode_ratio:.3f}, "
                f"engine/library {t.library_prefill_ratio:.3f} / {t.library_decode_ratio:.3f}) · "
                f"passkey {self.found}/{len(self.trials)} found at {format_count(length)} tokens")


def run_cell_bench(
    model_path: Path,
    profile: Profile,
    plan: CellBenchPlan = CellBenchPlan(),
    progress: ProgressFn = lambda msg, done, total: None,
    cancel: CancelToken | None = None,
) -> CellBenchReport:
    cancel = cancel or CancelToken()
    steps = plan.steps
    throughput = run_overhead(
        model_path, profile, plan.prompt_tokens, plan.decode_tokens, plan.rounds,
        progress=lambda msg, done, total: progress(f"throughput: {msg}", done, steps), cancel=cancel,
    )
    first_trial = plan.rounds + 1
    length = plan.passkey_length(profile)
    progress(f"passkey smoke: {length} tokens, depth {plan.depths[0]}", first_trial, steps)
    done = []

    def trial_done(trial: PasskeyTrial) -> None:
        done.append(trial)
        if len(done) < len(plan.depths):
            progress(f"passkey smoke: {length} tokens, depth {plan.depths[len(done)]}", first_trial + len(done), steps)

    engine = SessionEngine(model_path, profile)
    try:
        engine.open()
        trials = run_passkey(engine, [length], plan.depths, 1, progress=trial_done, cancel=cancel)
    finally:
        engine.close()
    progress("done", steps, steps)
    return CellBenchReport(profile.name, throughput, trials)
