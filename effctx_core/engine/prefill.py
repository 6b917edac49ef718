"""Putting tokens into the cache under the residency policy, and making room for them."""

from __future__ import annotations

from effctx_core.engine.state import EngineState
from effctx_core.events.trace import ResidencyAction, ResidencyChanged
from effctx_core.residency import Segment


def prefill(state: EngineState, new: list[int], kind: Segment, turn: int, resident: int) -> int:
    """Prefill the new tokens onto the tape; under an evicting policy in chunks, planning
    before each, so a prompt longer than the budget streams through instead of failing.
    Returns the tokens the backend computed."""
    cell = state.running
    session, tracker = cell.session, cell.tracker
    if not tracker.evicts:
        status = session.prefill_suffix(new, state.progress(turn, resident))
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
        status = session.prefill_suffix(chunk, state.progress(turn, session.explain().resident_tokens))
        prefilled += status.prefilled
        state.tape.extend(chunk)
        tracker.append(kind, len(chunk), turn)
    if not new:
        prefilled += session.prefill_suffix([]).prefilled
    return prefilled


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
    state.bus.emit(ResidencyChanged, turn=turn, report=tracker.report().to_dict())
