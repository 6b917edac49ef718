"""ConsoleEngine: everything a front end reads from an engine and every command it sends.

The console's screens (and the endpoint) hold a ConsoleEngine, never a backend: a live
SessionEngine, or a ReplayEngine rebuilt from a recorded trace. A replay can be watched,
not continued: `can_run` is False and every command that would run the model raises
ReplayError, so a front end asks `can_run` instead of asking which engine it holds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Protocol, Sequence

from effctx_core.contract import DecodeConfig
from effctx_core.engine.queued import QueuedEngine
from effctx_core.engine.records import NodeRestore, SwapResult
from effctx_core.engine.session_engine import SessionEngine
from effctx_core.events.replay import ReplayEngine
from effctx_core.events.subscribers import Subscriber, Unsubscribe
from effctx_core.events.trace import TurnResult
from effctx_core.models import ProgressFn
from effctx_core.profiles import Profile
from effctx_core.residency import ResidencyReport
from effctx_core.residency.tracker import ResidencyTracker
from effctx_core.snapshots.tree import SnapshotTree


class EventSource(Protocol):
    def subscribe(self, subscriber: Subscriber) -> Unsubscribe:
        """Call `subscriber` with every event from now on, on the thread that produced it
        (a live engine's worker thread); returns the call that stops it."""
        ...


class ConsoleEngine(EventSource, Protocol):
    @property
    def can_run(self) -> bool:
        """False for an engine that can be looked at but runs no model (a replay)."""
        ...

    # ------------------------------------------------------------------ what runs

    @property
    def model_path(self) -> Path: ...

    @property
    def model_name(self) -> str: ...

    @property
    def backend(self) -> str: ...

    @property
    def n_ctx(self) -> int: ...

    @property
    def profile(self) -> Profile: ...

    @property
    def policy(self) -> str:
        """The residency policy (a replay's: the recorded one, which it does not run)."""
        ...

    # ------------------------------------------------------------------ what it holds

    @property
    def tape(self) -> tuple[int, ...]: ...

    @property
    def residency(self) -> ResidencyTracker: ...

    def residency_report(self) -> ResidencyReport: ...

    @property
    def tree(self) -> SnapshotTree: ...

    def detokenize(self, tokens: Sequence[int]) -> str: ...

    @property
    def tokens_known(self) -> bool:
        """Whether the tree's tapes hold the session's token ids; a replay's hold
        placeholders of the right count (a trace records how many tokens, not which)."""
        ...

    def missing_states(self, keys: Iterable[str]) -> dict[str, str]:
        """Of these saved-state keys (tree nodes' blobs), the ones the engine's store does
        not hold, each with why ("quarantined", "not in the store", "checkpoints off")."""
        ...

    # ------------------------------------------------------------------ commands

    def chat(self, user_text: str, config: DecodeConfig = DecodeConfig()) -> TurnResult: ...

    def complete(self, prompt: str, config: DecodeConfig = DecodeConfig()) -> TurnResult: ...

    def reset(self) -> None: ...

    def restore_node(self, node_id: str) -> NodeRestore: ...

    def mark(self, label: str = "") -> str: ...

    def save_session(self, name: str) -> Path: ...

    def swap(self, profile: Profile) -> SwapResult: ...

    def prepare(self, profile: Profile, progress: ProgressFn) -> None:
        """Make the engine's model ready for `profile` (a conversion, once), so that a swap
        to it only opens it."""
        ...

    def set_budget(self, tokens: int) -> None: ...

    def recompute_cold(self) -> int: ...

    def cancel(self) -> None: ...

    def close(self) -> None: ...


# mypy checks here that both engines are ConsoleEngines, without a front end having to
# hold one of each first.
_LIVE: type[ConsoleEngine] = SessionEngine
_SHARED: type[ConsoleEngine] = QueuedEngine
_REPLAY: type[ConsoleEngine] = ReplayEngine
