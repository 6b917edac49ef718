"""Putting tokens into the cache under the residency policy, and making room for them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from effctx_core.contract import ProgressSink, Session, SuffixStatus
from effctx_core.engine.state import EngineState
from effctx_core.events.trace import ResidencyAction, ResidencyChanged, plan_runs
from effctx_core.residency import Segment
from effctx_core.residency.tracker import SegmentRun

if TYPE_CHECKING:
    import numpy as np


def prefill(state: EngineState, new: list[int], kind: Segment, turn: int, resident: int,
            scores: list[np.ndarray] | None = None) -> int:
    """Prefill the new tokens onto the tape; under an evicting policy in chunks, planning
    before each, so a prompt longer than the budget streams through instead of failing.
    With `scores`, each token is scored too (score_suffix) and each call's log-probabilities
    are appended to it, in tape order. Returns the tokens the backend computed."""
    cell = state.running
    session, tracker = cell.session, cell.tracker
    if not tracker.evicts:
        status = _suffix(session, new, state.progress(turn, resident), scores)
        state.tape.extend(new)
        tracker.append(kind, len(new), turn)
        return status.prefilled
    residency = cell.profile.residency
    window = residency.recent_tokens or residency.block_size
    step = max(1, min(cell.profile.n_batch, window))
    prefilled = 0
    for off in range(0, len(new), step):
        chunk = new[off : off + step]
        make_room(state, len(chunk), turn, "prefill")
        status = _suffix(session, chunk, state.progress(turn, session.explain().resident_tokens), scores)
        prefilled += status.prefilled
        state.tape.extend(chunk)
        tracker.append(kind, len(chunk), turn)
    if not new:
        prefilled += _suffix(session, [], None, scores).prefilled
    return prefilled


def prefill_runs(state: EngineState, tokens: list[int], runs: Sequence[SegmentRun], resident: int) -> int:
    """Prefill `tokens`, which `runs` cover, so the tape keeps the segments they say (a
    recompute after a swap, a restore or a parked block). Returns the tokens computed.
    Without eviction in one call, so its progress and a cancel count all of `tokens`;
    under an evicting policy run by run, each streamed through the policy."""
    tracker = state.tracker
    if not tracker.evicts:
        start = len(state.tape)
        prefilled = prefill(state, tokens, Segment.OTHER, 0, resident)
        tracker.truncate(start)
        for run in runs:
            tracker.append(run.kind, run.tokens, run.turn)
        return prefilled
    done = prefilled = 0
    for run in runs:
        prefilled += prefill(state, tokens[done : done + run.tokens], run.kind, run.turn,
                             resident if not done else state.session.explain().resident_tokens)
        done += run.tokens
    return prefilled


def _suffix(session: Session, tokens: Sequence[int], progress: ProgressSink | None,
            scores: list[np.ndarray] | None) -> SuffixStatus:
    if scores is None:
        return session.prefill_suffix(tokens, progress)
    scored = session.score_suffix(tokens, progress)
    scores.append(scored.logprobs)
    return scored.status


def make_room(state: EngineState, extra: int, turn: int, stage: str) -> None:
    """Ask the policy for a plan if `extra` more tokens would break the budget, and have
    the backend's executor carry it out."""
    cell = state.running
    tracker = cell.tracker
    planned = tracker.plan(extra)
    if planned is None:
        return
    current = tracker.table()
    demoted = tracker.demoted(planned)
    actions = cell.executor.apply(current, planned, demoted)
    tracker.commit(planned)
    for act in actions:
        kind = "slide" if stage == "decode" and act.action == "evict" else act.action
        state.bus.emit(ResidencyAction, turn=turn, stage=stage, action=kind, start=act.start, end=act.end,
                       pos_start=act.pos_start, pos_end=act.pos_end, ms=round(act.ms, 3))
        if act.shift:
            state.bus.emit(ResidencyAction, turn=turn, stage=stage, action="shift", start=act.start, end=act.end,
                           pos_start=act.shifted_from, pos_end=act.shifted_from + act.shift, ms=0.0)
    state.bus.emit(ResidencyChanged, turn=turn, report=tracker.report().to_dict(), plan=plan_runs(tracker.table()))
