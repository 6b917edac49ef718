"""What the console reads from an engine, rebuilt from a recorded trace: no model.

The trace holds what happened, not the weights: the tape is known by length (decoded
tokens also by id and text), the residency by the executor's recorded ranges. A replay
can be looked at, not continued: every command that would run the model is refused.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Iterable, NoReturn, Sequence

from effctx_core.contract import DecodeConfig
from effctx_core.errors import EffctxError
from effctx_core.events.reader import Trace
from effctx_core.events.subscribers import Subscriber, Subscribers, Unsubscribe
from effctx_core.events.trace import (
    CellResidency,
    CellSwapped,
    Event,
    NodeAdded,
    NodeRestored,
    PrefillChunk,
    PrefixChecked,
    ResidencyAction,
    ResidencyChanged,
    SessionOpened,
    SwapAbandoned,
    TokenDecoded,
    TurnFinished,
    TurnStarted,
)
from effctx_core.models import ProgressFn
from effctx_core.profiles import Profile
from effctx_core.residency import BlockClass, Reason, ResidencyReport, Segment
from effctx_core.residency.config import ResidencyConfig
from effctx_core.residency.policies import PlannerCaps
from effctx_core.residency.report import UNKNOWN
from effctx_core.residency.tracker import ResidencyTracker
from effctx_core.snapshots.tree import SnapshotTree, TurnText

UNKNOWN_TOKEN = -1  # a prefilled token: the trace records how many, not which

_ACTION_CLASS = {
    "evict": (BlockClass.EVICTED, Reason.EVICTED_OUTSIDE_WINDOWS),
    "slide": (BlockClass.EVICTED, Reason.SLID_OUT),
    "park": (BlockClass.COLD, Reason.PARKED),
}


class ReplayError(EffctxError):
    pass


def _refuse() -> NoReturn:
    raise ReplayError("this is a replay of a recorded trace: it can be watched, not continued")


class ReplayEngine:
    can_run = False

    def __init__(self, trace: Trace):
        opened = trace.events[0]
        if not isinstance(opened, SessionOpened):  # read_trace refuses such a trace
            raise ReplayError(f"{trace.path}: the trace does not start with a session_opened event")
        self.trace = trace
        self.model_path = Path(trace.path)
        self._opened = opened
        self._subscribers = Subscribers()
        self.rewind()

    def rewind(self) -> None:
        """Back to before the recording's first event, to play it again; the subscribers stay."""
        opened = self._opened
        self._run_cell(opened, opened.model, opened.backend, opened.n_ctx)
        self.tree = SnapshotTree()
        root = self.tree.add(None, (), "root", opened.identity, label="start", created=opened.started)
        self._node_ids: dict[str, str] = {"": root.id}  # the recorded engine's node ids -> ours
        self._tape: list[int] = []
        self._pieces: dict[int, str] = {}
        self._turn = 0
        self._input = ""  # the running turn's input, for its node's label
        self._reply = ""

    def _run_cell(self, cell: CellResidency, model: str, backend: str, n_ctx: int) -> None:
        """Run on the recorded cell: its residency settings, and the recorded policy's
        blocks, so the recorded plans land on the same block edges. The policy itself never
        runs here ("none" plans nothing): its plans are replayed."""
        self.model_name, self.backend, self.n_ctx = model, backend, n_ctx
        recorded = ResidencyConfig(policy=cell.policy, sink_tokens=cell.sink_tokens, recent_tokens=cell.recent_tokens,
                                   budget=cell.budget, block_size=cell.block_size, slide_tokens=cell.slide_tokens)
        self.profile = Profile(name="replay", n_ctx=max(16, n_ctx), residency=recorded)
        self.policy = cell.policy
        self.residency = ResidencyTracker(ResidencyConfig(block_size=cell.block_size), cell.budget or n_ctx,
                                          PlannerCaps(), source=cell.residency_source)

    def _swap_cell(self, event: CellSwapped) -> None:
        """The new cell of a swap takes the tape over with its segments, as the live one did."""
        runs = self.residency.segments_from()
        # A swap recorded before it said the new cell's residency: its blocks are drawn on
        # the opening cell's edges, and neither its policy nor its source is claimed.
        cell = event if event.recorded else replace(self._opened, policy=UNKNOWN, residency_source=UNKNOWN)
        self._run_cell(cell, event.model or self.model_name, event.backend, event.n_ctx)
        self.residency.reset(runs)

    # ------------------------------------------------------------------ what the UI reads

    @property
    def tape(self) -> tuple[int, ...]:
        return tuple(self._tape)

    def residency_report(self) -> ResidencyReport:
        # The tracker here plans nothing; the blocks' classes are the recorded policy's.
        return replace(self.residency.report(), policy=self.policy)

    def detokenize(self, tokens: Sequence[int]) -> str:
        return "".join(self._pieces.get(int(t), "") for t in tokens)

    @property
    def tokens_known(self) -> bool:
        return False  # the tree's tapes are placeholders (_add_node)

    def missing_states(self, keys: Iterable[str]) -> dict[str, str]:
        # A replay reads no store: its tree shows the states as the recording had them.
        return {}

    def subscribe(self, subscriber: Subscriber) -> Unsubscribe:
        """Call `subscriber` with every event applied from now on (on the player's thread)."""
        return self._subscribers.subscribe(subscriber)

    def cancel(self) -> None:
        pass

    def close(self) -> None:
        pass

    # ------------------------------------------------------------------ what it refuses

    def chat(self, user_text: str, config: DecodeConfig = DecodeConfig()) -> NoReturn:
        _refuse()

    def complete(self, prompt: str, config: DecodeConfig = DecodeConfig()) -> NoReturn:
        _refuse()

    def reset(self) -> NoReturn:
        _refuse()

    def restore_node(self, node_id: str) -> NoReturn:
        _refuse()

    def mark(self, label: str = "") -> NoReturn:
        _refuse()

    def save_session(self, name: str) -> NoReturn:
        _refuse()

    def swap(self, profile: Profile) -> NoReturn:
        _refuse()

    def prepare(self, profile: Profile, progress: ProgressFn) -> NoReturn:
        _refuse()

    def set_budget(self, tokens: int) -> NoReturn:
        _refuse()

    def recompute_cold(self) -> NoReturn:
        _refuse()

    # ------------------------------------------------------------------ playing

    def apply(self, event: Event) -> None:
        """Move the rebuilt state to just after `event`, then hand it to the subscribers."""
        self._rebuild(event)
        self._subscribers.deliver(event)

    def _rebuild(self, event: Event) -> None:
        if isinstance(event, TurnStarted):
            self._turn = event.turn
            self._input = event.input_text
        elif isinstance(event, TurnFinished):
            self._reply = event.result.text
            if event.tape < len(self._tape):
                self._truncate(event.tape)  # the stop text the engine cut off the tape
        elif isinstance(event, NodeAdded):
            self._add_node(event)
        elif isinstance(event, PrefixChecked):
            if event.dropped:
                self._truncate(len(self._tape) - event.dropped)
        elif isinstance(event, PrefillChunk):
            segment = Segment.USER if event.stage == "prefill" else Segment.OTHER
            self._tape.extend([UNKNOWN_TOKEN] * event.tokens)
            self.residency.append(segment, event.tokens, self._turn)
        elif isinstance(event, TokenDecoded):
            self._pieces[event.token] = event.text
            self._tape.append(event.token)
            self.residency.append(Segment.ASSISTANT, 1, self._turn)
        elif isinstance(event, ResidencyChanged):
            for start, end, label, why in event.plan:
                self.residency.mark_range(start, end, BlockClass[label.upper()], Reason[why.upper()])
        elif isinstance(event, ResidencyAction):
            if event.action in _ACTION_CLASS:
                cls, reason = _ACTION_CLASS[event.action]
                self.residency.mark_range(event.start, event.end, cls, reason)
        elif isinstance(event, (CellSwapped, SwapAbandoned, NodeRestored)):
            # Afterwards the tape is `tokens` long; the prefill chunks of a recompute
            # (or of a cancelled one) were appended after it above.
            self._resize(event.tokens)
            if isinstance(event, CellSwapped):
                self._swap_cell(event)
            if isinstance(event, NodeRestored) and event.node in self._node_ids:
                self.tree.set_current(self._node_ids[event.node])

    def _add_node(self, event: NodeAdded) -> None:
        """The node the engine added, with its tape length; the tokens themselves are not
        in the trace, so its own tokens are placeholders of the right count."""
        parent = self._node_ids.get(event.parent, self._node_ids[""])  # "" is the root
        own = max(0, event.tokens - self.tree.tape_length(parent))
        said = TurnText(self._input, self._reply)
        # A request's node says its conversation where the live one did, in its metrics.
        metrics = {"conversation": event.conversation} if event.conversation else None
        # The recorded id where it is free, so that an id the recorded engine gives (a
        # restore's, or one a watching console sends it) names the same node here.
        own_id = event.node if event.node and event.node not in self.tree else None
        node = self.tree.add(parent, (0,) * own, "turn", self._opened.identity, label=event.label or said.label,
                             turn=said, metrics=metrics, created=self._opened.started + event.t_ms / 1000,
                             node_id=own_id)
        self._node_ids[event.node] = node.id

    def recorded_node(self, node_id: str) -> str | None:
        """The recorded engine's id of this tree's node `node_id` (None: the root, or none)."""
        return next((recorded for recorded, ours in self._node_ids.items() if ours == node_id and recorded), None)

    def _resize(self, n: int) -> None:
        if n <= len(self._tape):
            self._truncate(n)
        else:  # a restore onto another branch: its tokens are not in the trace
            self.residency.append(Segment.OTHER, n - len(self._tape), self._turn)
            self._tape.extend([UNKNOWN_TOKEN] * (n - len(self._tape)))

    def _truncate(self, n: int) -> None:
        del self._tape[max(n, 0):]
        self.residency.truncate(max(n, 0))
