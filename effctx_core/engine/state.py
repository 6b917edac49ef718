"""What the engine's collaborators share: the running cell, the tape, the tree, the event
bus and the cancel gate. The facade holds the lock; collaborators run under it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

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

    def progress(self, turn: int, start: int) -> Callable[[PrefillProgress], None]:
        return self.gate.progress(self.bus, turn, start)
