"""Running a workload: every turn through the engine, then through the control."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Callable, Sequence

from effctx_core.bench.workload_run.control import control_baseline
from effctx_core.bench.workload_run.records import ControlTurn, TurnRun, WorkloadReport
from effctx_core.bench.workloads import Turn, Workload
from effctx_core.cancel import CancelToken
from effctx_core.contract import Baseline, BaselineRun, DecodeConfig
from effctx_core.engine import SessionEngine, TurnResult
from effctx_core.errors import Cancelled
from effctx_core.profiles import Profile
from effctx_core.residency.report import MODELED
from effctx_core.snapshots import SnapshotStore
from effctx_core.units import ms_since, ttft_after

ProgressFn = Callable[[str, int, int], None]  # message, steps done, steps


class _Run:
    """One workload on one profile: the engine, the control, and the turns so far."""

    def __init__(self, model_path: Path, profile: Profile, workload: Workload, baseline: Baseline | None,
                 folder: Path, progress: ProgressFn, cancel: CancelToken, steps: int):
        self.model_path = model_path
        self.profile = profile
        self.workload = workload
        self.baseline = baseline
        self.prefix_cache = SnapshotStore(folder / "prefix")
        self.checkpoints = SnapshotStore(folder / "checkpoints")
        self.progress = progress
        self.cancel = cancel
        self.steps = steps
        self.turns: list[TurnRun] = []
        self.accounting: list[str] = []
        self.engine = self._engine()

    def _engine(self) -> SessionEngine:
        engine = SessionEngine(self.model_path, self.profile, prefix_cache=self.prefix_cache,
                               checkpoints=self.checkpoints)
        engine.open()
        return engine

    def close(self) -> None:
        self.engine.close()

    @property
    def snapshots(self) -> bool:
        return self.engine.info.capabilities.state_snapshot.supported

    def _ids(self, text: str) -> list[int]:
        """The ids `complete(text)` appends: the tokenization the engine itself does."""
        session = self.engine.session
        return session.tokenize(text, add_bos=not self.engine.tape and session.info.facts.add_bos)

    def turn(self, label: str, kind: str, turn: Turn, text: str, lead_ms: float = 0.0, lead_computed: int = 0,
             how: str = "") -> None:
        """Run `text` (the turn's framed message, or more) through the engine and the
        control; `lead_*`: what a prefix load or restore just before it cost, counted
        in this turn as the user waits for both. The engine reports the tokens the lead
        made resident as reused; those it computed count as computed here."""
        self.cancel.check("benchmark")
        self.progress(f"{self.workload.name} · {label}", len(self.turns), self.steps)
        before = list(self.engine.tape)
        prompt = before + self._ids(text)
        config = DecodeConfig(max_tokens=turn.max_tokens, stop=self.workload.framing.stop)
        counters = self.engine.explain()
        # Tape tokens effctx's policy took out before this turn: neither reused nor
        # computed by it. (A modeled map is the runtime's own eviction, which happens
        # inside the runtime, after effctx handed it the tokens.)
        residency = self.engine.residency_report()
        gone = len(before) - residency.resident_tokens if before and residency.source != MODELED else 0
        # The two sides take turns at going first: whatever the first run of a turn pays
        # for (or leaves warm) falls on each side alike.
        control_first = len(self.turns) % 2 == 1
        run = self._control(prompt, turn) if control_first else None
        t0 = time.perf_counter_ns()
        with self.cancel.forwarded_to(self.engine.cancel):
            result = self.engine.complete(text, config)
        wall = ms_since(t0) + lead_ms
        if result.stop_reason == "cancelled":
            raise Cancelled("benchmark cancelled")
        self._check_accounting(label, result, len(prompt) - gone, counters.prefill_tokens)
        reply_ids = self.engine.tape[len(prompt):]
        # The turn's checkpoint is written in the background, as it is while a user reads
        # the reply; it ends before the control starts, so it slows neither side's timing.
        self.engine.settle()
        if not control_first:
            run = self._control(prompt, turn)
        control = ControlTurn.of(run, reply_ids) if run is not None else None
        self.turns.append(TurnRun(
            # The lead's computed tokens the engine reports as reused are this turn's own
            # work. On an evicting cell fewer of them are still resident than the lead
            # computed (the window moved on), and none of the rest was reused: never below 0.
            label=label, kind=kind, prompt_tokens=len(prompt), reused=max(0, result.reused - lead_computed),
            computed=result.prefilled + lead_computed, dropped=result.dropped, ttft_ms=ttft_after(lead_ms, result.ttft_ms),
            prefill_tps=result.prefill_tps, decode_tps=result.decode_tps, generated=result.generated, wall_ms=wall,
            reply=result.text, correct=turn.grade(result.text), how=how or result.prefix_reason, control=control,
        ))

    def _control(self, prompt: list[int], turn: Turn) -> BaselineRun | None:
        if self.baseline is None:
            return None
        return self.baseline.control(prompt, turn.max_tokens, self.workload.framing.stop)

    def _check_accounting(self, label: str, result: TurnResult, prompt_tokens: int, prefilled_before: int) -> None:
        """What the engine reported against what the session counted (and, where the
        runtime counts for itself, against the runtime's own figures); `prompt_tokens`:
        the prompt less what was evicted before the turn."""
        report = self.engine.explain()
        counted = report.prefill_tokens - prefilled_before
        if result.reused + result.prefilled != prompt_tokens:
            self.accounting.append(f"{label}: reused {result.reused} + computed {result.prefilled} "
                                   f"!= the prompt's {prompt_tokens} tokens still in the cache")
        if counted < result.prefilled:
            self.accounting.append(f"{label}: reported {result.prefilled} computed, the session counted {counted}")
        if report.runtime_counts is not None and not report.runtime_counts.agree:
            self.accounting.append(f"{label}: the runtime's own counts differ: {report.runtime_counts}")

    def warm_up(self) -> None:
        """A short turn on each side before turn 1, kept out of every figure: the first
        calls in a process pay one-time costs (threads started, buffers allocated, the
        weights paged in) that belong to neither side's first turn. effctx's runs on an
        engine of its own, so the measured one starts with an empty cache and tree."""
        self.progress(f"{self.workload.name} · warming up", 0, self.steps)
        text = self.workload.framing.render(self.workload.turns[0])
        config = DecodeConfig(max_tokens=8, stop=self.workload.framing.stop)
        engine = SessionEngine(self.model_path, self.profile)
        try:
            engine.open()
            with self.cancel.forwarded_to(engine.cancel):
                engine.complete(text, config)
        finally:
            engine.close()
        self.cancel.check("benchmark")
        if self.baseline is not None:
            self.baseline.control(self._ids(text), 8, self.workload.framing.stop)
            self.baseline.forget()

    # ------------------------------------------------------------------ the parts of a workload

    def first_turn(self, kind: str) -> None:
        """The stable prefix through effctx's prefix cache, then the first message."""
        w = self.workload
        self.cancel.check("benchmark")
        if self.baseline is not None and kind == "cold":
            self.baseline.forget()
        t0 = time.perf_counter_ns()
        with self.cancel.forwarded_to(self.engine.cancel):
            loaded = self.engine.load_prefix(w.prefix)
        lead = ms_since(t0)
        how = f"prefix cache {loaded.cache}: {loaded.tokens} tokens, {loaded.restored} restored, {loaded.computed} computed"
        self.turn("turn 1" if kind == "cold" else "turn 1, new process", kind, w.turns[0], w.framing.render(w.turns[0]),
                  lead_ms=lead, lead_computed=loaded.computed,
                  how=how)

    def later_turns(self, turns: Sequence[Turn], first_number: int, label: str = "turn", kind: str = "suffix") -> None:
        w = self.workload
        for i, turn in enumerate(turns):
            number = first_number + i
            if w.edit is not None and kind == "suffix" and number == w.edit.before_turn:
                self.edited_turn(turn, number)
            else:
                self.turn(f"{label} {number}", kind, turn, w.framing.render(turn))

    def text_after_prefix(self) -> str:
        """The conversation after the stable prefix as text: the messages and replies."""
        session = self.engine.session
        prefix = session.tokenize(self.workload.prefix, add_bos=session.info.facts.add_bos)
        return self.engine.detokenize(self.engine.tape[len(prefix):])

    def edited_turn(self, turn: Turn, number: int) -> None:
        """The stable prefix changes by one word: the conversation is sent again as text
        with the edit; effctx and the library both keep what precedes the change."""
        w = self.workload
        assert w.edit is not None
        after_prefix = self.text_after_prefix()
        self.engine.reset()
        self.turn(f"turn {number} (prefix edited)", "edit", turn, w.edit.apply(w.prefix) + after_prefix
                  + w.framing.render(turn))

    def branches(self, node: str, branch_text: str) -> None:
        w = self.workload
        for branch in w.branches:
            self.cancel.check("benchmark")
            first, rest = branch.turns[0], branch.turns[1:]
            if self.snapshots:
                t0 = time.perf_counter_ns()
                restored = self.engine.restore_node(node)
                how = f"restored turn {w.branch_after}: {restored.mode} ({restored.reason}) in {restored.ms:.0f} ms"
                self.turn(f"{branch.name} 1", "branch", first, w.framing.render(first), lead_ms=ms_since(t0),
                          lead_computed=restored.recomputed, how=how)
            else:
                # No state to restore: the conversation up to the branch point is sent
                # again, and the runtime's own cache keeps what it still holds.
                self.engine.reset()
                self.turn(f"{branch.name} 1", "branch", first, branch_text + w.framing.render(first))
            self.later_turns(rest, 2, branch.name, "branch")

    def second_process(self) -> None:
        """A new engine on the same persistent prefix cache; the control starts empty."""
        self.engine.close()
        self.engine = self._engine()
        if self.baseline is not None:
            self.baseline.forget()
        self.first_turn("second-process")


def workload_steps(workload: Workload) -> int:
    return len(workload.turns) + sum(len(b.turns) for b in workload.branches) + 1


def run_workload(model_path: Path, profile: Profile, workload: Workload, control: bool = True,
                 progress: ProgressFn = lambda m, d, t: None, cancel: CancelToken | None = None,
                 control_backend: str | None = None) -> WorkloadReport:
    """Run every turn of `workload` on `profile`, each beside the raw control unless
    `control` is off: the profile's own library's, or `control_backend`'s (llama-server:
    the server a user would run instead, on the same settings). The prefix cache and
    checkpoints live in a temporary folder, so a run never starts warm from an earlier one."""
    cancel = cancel or CancelToken()
    steps = workload_steps(workload)
    baseline = control_baseline(model_path, profile, control_backend) if control else None
    try:
        with tempfile.TemporaryDirectory(prefix="effctx-workload-") as folder:
            run = _Run(model_path, profile, workload, baseline, Path(folder), progress, cancel, steps)
            try:
                run.warm_up()
                run.first_turn("cold")
                w = workload
                split = w.branch_after if w.branch_after is not None else len(w.turns)
                run.later_turns(w.turns[1:split], 2)
                if w.branch_after is not None:
                    node = run.engine.mark(f"after turn {w.branch_after}")
                    text = w.prefix + run.text_after_prefix()
                    run.later_turns(w.turns[split:], split + 1)
                    run.branches(node, text)
                run.second_process()
            finally:
                run.close()
    finally:
        if baseline is not None:
            baseline.close()
    progress("done", steps, steps)
    return WorkloadReport(workload.name, workload.digest, profile.name, profile.backend,
                          baseline.library_name if baseline is not None else None, tuple(run.turns),
                          tuple(run.accounting))
