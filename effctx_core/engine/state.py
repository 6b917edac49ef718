"""What the engine's collaborators share: the running cell, the tape, the tree, the event
bus and the cancel gate. The facade holds the lock; collaborators run under it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from effctx_core.backends.tape import common_prefix_length
from effctx_core.contract import PrefillProgress, Session
from effctx_core.engine.cancel_gate import CancelGate
from effctx_core.engine.cell import RunningCell
from effctx_core.engine.events import EventBus
from effctx_core.errors import EffctxError
from effctx_core.residency.tracker import ResidencyTracker
from effctx_core.snapshots.tree import SnapshotTree


@dataclass
class EngineState:
    model_path: Path
    bus: EventBus
    gate: CancelGate
    cell: RunningCell | None = None
    tape: list[int] = field(default_factory=list)
    turns: int = 0
    tree: SnapshotTree = field(default_factory=SnapshotTree)
    # The tape of the conversation a reset ended: the session holds it until the next
    # conversation starts, which keeps what it shares with it.
    left: list[int] = field(default_factory=list)

    @property
    def running(self) -> RunningCell:
        if self.cell is None:
            raise EffctxError("the engine has no open session")
        return self.cell

    @property
    def session(self) -> Session:
        return self.running.session

    @property
    def tracker(self) -> ResidencyTracker:
        return self.running.tracker

    def take_left(self, tokens: Sequence[int]) -> int:
        """How many of `tokens` (a new conversation's first) the session still holds from
        the conversation a reset ended, which is then forgotten. At most all but the
        last: the last is prefilled for the next-token logits. None under an evicting
        policy, whose cache holds the old tape shifted and in part."""
        left, self.left = self.left, []
        if self.tape or not left or not tokens or self.tracker.evicts:
            return 0
        return min(common_prefix_length(left, tokens), len(tokens) - 1)

    def progress(self, turn: int, start: int) -> Callable[[PrefillProgress], None]:
        return self.gate.progress(self.bus, turn, start)
