"""What the console reads from an engine, rebuilt from a recorded trace: no model.

The trace holds what happened, not the weights: the tape is known by length (decoded
tokens also by id and text), the residency by the executor's recorded ranges. A replay
can be looked at, not continued: every command that would run the model is refused.
"""

from __future__ import annotations

from pathlib import Path

from .contract import EffctxError
from .profiles import Profile, ResidencyConfig
from .residency import BlockClass, Reason, ResidencyReport, Segment
from .residency.planners import PlannerCaps
from .residency.tracker import ResidencyTracker
from .snapshots.tree import SnapshotTree
from .trace import Event
from .trace_reader import Trace

UNKNOWN_TOKEN = -1  # a prefilled token: the trace records how many, not which

_ACTION_CLASS = {
    "evict": (BlockClass.EVICTED, Reason.EVICTED_OUTSIDE_WINDOWS),
    "slide": (BlockClass.EVICTED, Reason.SLID_OUT),
    "park": (BlockClass.COLD, Reason.PARKED),
}


class ReplayError(EffctxError):
    pass


class ReplayEngine:
    read_only = True

    def __init__(self, trace: Trace):
        opened = trace.events[0]
        self.trace = trace
        self.model_path = Path(trace.path)
        self.model_name = opened.model
        self.backend = opened.backend
        self.n_ctx = opened.n_ctx
        self.profile = Profile(name="replay", n_ctx=max(16, opened.n_ctx))
        # The recorded policy's blocks, so evicted ranges land on the same block edges; the
        # policy itself never runs here ("none" plans nothing).
        self.policy = opened.policy
        self.residency = ResidencyTracker(ResidencyConfig(block_size=opened.block_size), opened.budget or opened.n_ctx,
                                          PlannerCaps())
        self.tree = SnapshotTree()
        self.tree.add(None, (), "root", opened.identity, label="start")
        self._tape: list[int] = []
        self._pieces: dict[int, str] = {}
        self._turn = 0

    # ------------------------------------------------------------------ what the UI reads

    @property
    def tape(self) -> tuple[int, ...]:
        return tuple(self._tape)

    def residency_report(self) -> ResidencyReport:
        return self.residency.report()

    def detokenize(self, tokens) -> str:
        return "".join(self._pieces.get(int(t), "") for t in tokens)

    def cancel(self) -> None:
        pass

    def close(self) -> None:
        pass

    # ------------------------------------------------------------------ what it refuses

    def _read_only(self, *args, **kwargs):
        raise ReplayError("this is a replay of a recorded trace: it can be watched, not continued")

    chat = complete = restore_node = swap = reset = save_session = mark = _read_only

    # ------------------------------------------------------------------ playing

    def apply(self, event: Event) -> None:
        """Move the rebuilt state to just after `event`."""
        kind = event.kind
        if kind == "turn_started":
            self._turn = event.turn
        elif kind == "prefix_checked" and event.dropped:
            self._truncate(len(self._tape) - event.dropped)
        elif kind == "prefill_chunk":
            segment = Segment.USER if event.stage == "prefill" else Segment.OTHER
            self._tape.extend([UNKNOWN_TOKEN] * event.tokens)
            self.residency.append(segment, event.tokens, self._turn)
        elif kind == "token":
            self._pieces[event.token] = event.text
            self._tape.append(event.token)
            self.residency.append(Segment.ASSISTANT, 1, self._turn)
        elif kind == "turn_finished" and event.tape < len(self._tape):
            self._truncate(event.tape)  # the stop text the engine cut off the tape
        elif kind == "residency_action" and event.action in _ACTION_CLASS:
            cls, reason = _ACTION_CLASS[event.action]
            self.residency.mark_range(event.start, event.end, cls, reason)

    def _truncate(self, n: int) -> None:
        del self._tape[max(n, 0):]
        self.residency.truncate(max(n, 0))
