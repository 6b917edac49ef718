"""Moving the running conversation to another cell (profile, backend)."""

from __future__ import annotations

import time

from effctx_core.engine.cell import RunningCell
from effctx_core.engine.prefill import prefill_runs
from effctx_core.engine.records import PrefillCancelled, SwapCancelled, SwapResult
from effctx_core.engine.state import EngineState
from effctx_core.errors import EffctxError
from effctx_core.events.explain import identity_change
from effctx_core.events.trace import CellSwapped, SwapAbandoned
from effctx_core.profiles import Profile
from effctx_core.units import ms_since


def swap(state: EngineState, profile: Profile) -> SwapResult:
    """Open `profile`'s cell and move the tape into it.

    The tape goes over exactly (the old state restored) when the runtime identity allows
    it, otherwise it is recomputed, which is reported with its cost. Only then is the old
    cell closed, so a recompute can be cancelled: the new cell is closed and the
    conversation stays where it was. The tree is kept either way.
    """
    old = state.running
    old_tape = list(state.tape)
    t0 = time.perf_counter_ns()
    state.gate.clear()  # an Esc pressed before the swap began is not for it
    new = RunningCell.open(state.model_path, profile)
    old_identity, new_identity = old.session.info.identity, new.session.info.identity
    try:
        if new_identity == old_identity and not old.tracker.evicts \
                and new.session.info.capabilities.state_snapshot.supported:
            new.session.restore(old.session.snapshot())
            if list(new.session.tokens) != old_tape:
                new.session.ensure_prefix(old_tape)  # a stop text the tape had dropped
            mode, recomputed, reason, details = "exact", 0, "the same runtime identity", ""
        else:
            differences = old_identity.differences(new_identity)
            details = ", ".join(f"{n} {a!r} -> {b!r}" for n, a, b in differences)
            if differences:
                reason = identity_change([name for name, _, _ in differences])
            elif old.tracker.evicts:
                reason = "the cache held only part of the tape (an evicting policy)"
            else:
                reason = "the new cell cannot load a state"
            mode, recomputed = "recompute", len(old_tape)
        state.cell = new
        # The tape keeps its segments (user, assistant, document) on the new cell.
        runs = old.tracker.segments_from()
        if mode == "recompute":
            state.tape = []
            with state.gate.cancellable():
                prefill_runs(state, old_tape, runs, 0)
        else:
            new.tracker.reset(runs)
    except EffctxError as exc:
        state.cell, state.tape = old, old_tape
        new.close()
        if not isinstance(exc, PrefillCancelled):
            raise
        ms = ms_since(t0)
        state.bus.emit(SwapAbandoned, old_profile=old.profile.name, new_profile=profile.name,
                       done=exc.done, total=exc.total, tokens=len(old_tape), ms=round(ms, 3))
        raise SwapCancelled(
            f"swap to {profile.name} cancelled after recomputing {exc.done} of {exc.total} tokens; "
            f"still on {old.profile.name}"
        ) from None
    old.close()
    result = SwapResult(old.profile.name, profile.name, mode, len(old_tape), recomputed,
                        ms_since(t0), reason, details)
    info = new.session.info
    state.bus.emit(CellSwapped, old_profile=result.old_profile, new_profile=result.new_profile, mode=mode,
                   tokens=result.tokens, recomputed=recomputed, ms=round(result.ms, 3), reason=reason,
                   backend=info.backend, n_ctx=info.n_ctx, identity=info.identity.digest(), details=details,
                   model=info.facts.name, **new.recorded_residency())
    return result
