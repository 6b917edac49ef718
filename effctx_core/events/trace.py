"""Engine events: typed records, streamed to subscribers and written as JSON Lines."""

from __future__ import annotations

import json
import os
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import ClassVar, TextIO

import numpy as np

from effctx_core.contract import RuntimeCounts
from effctx_core.errors import EffctxError
from effctx_core.residency.blocks import BlockClass, BlockTable, Reason
from effctx_core.residency.report import UNKNOWN
from effctx_core.temp_files import create_temp_file, sweep_dead_temps
from effctx_core.user_files import UserFileError, check_output_file, open_input, os_reason


@dataclass(frozen=True)
class TurnResult:
    """What one engine turn did, as the engine reports it and its turn_finished event
    carries it (so it lives with the events: the engine imports it from here)."""

    text: str
    stop_reason: str
    reused: int
    prefilled: int
    generated: int
    dropped: int
    evicted: int  # tokens the residency policy took out of the cache during the turn
    prefix_reason: str
    ttft_ms: float | None  # None when no token arrived: a turn cancelled before it has no time to one
    prefill_ms: float
    decode_ms: float
    prefill_tps: float
    decode_tps: float
    resident: int
    available: int
    n_ctx: int
    # The PrefixCause value of the turn's prefix check ("" in traces written before it).
    prefix_cause: str = ""
    # Tape tokens not in the cache yet: the reply's last one, which the next turn's
    # batch evaluates (0 in traces written before it was kept pending).
    pending: int = 0


@dataclass(frozen=True)
class Event:
    kind: ClassVar[str] = "event"
    t_ms: float = field(default=0.0, kw_only=True)

    def to_json(self) -> str:
        return json.dumps({"kind": self.kind, **asdict(self)}, separators=(",", ":"))


@dataclass(frozen=True)
class ModelProgress(Event):
    kind: ClassVar[str] = "model_progress"
    stage: str
    done: int
    total: int


@dataclass(frozen=True, kw_only=True)
class CellResidency:
    """What a replay needs to rebuild a cell's residency view block for block: the policy,
    its windows, and whether the map is observed or modeled. SessionOpened records the
    opened cell's, CellSwapped the new cell's."""

    policy: str = "none"
    block_size: int = 32
    budget: int = 0
    # The policy's windows (0 in traces written before they were recorded).
    sink_tokens: int = 0
    recent_tokens: int = 0
    slide_tokens: int = 0
    # observed or modeled, as the backend said, and its reason; a trace written before
    # they were recorded does not say (and its swaps recorded none of these fields).
    residency_source: str = UNKNOWN
    residency_reason: str = ""

    @property
    def recorded(self) -> bool:
        return self.residency_source != UNKNOWN


@dataclass(frozen=True)
class SessionOpened(Event, CellResidency):
    kind: ClassVar[str] = "session_opened"
    backend: str
    model: str
    n_ctx: int
    identity: str
    started: float = 0.0  # wall clock (seconds since the epoch) at t_ms 0


@dataclass(frozen=True)
class TurnStarted(Event):
    kind: ClassVar[str] = "turn_started"
    turn: int
    input_text: str
    prefix_tokens: int
    suffix_tokens: int


@dataclass(frozen=True)
class PrefixChecked(Event):
    kind: ClassVar[str] = "prefix_checked"
    turn: int
    reused: int
    prefilled: int
    dropped: int
    resident: int
    reason: str  # the sentence, for people; views read the cause and its numbers
    cause: str = ""  # a PrefixCause value
    diverged_at: int | None = None
    rollback_floor: int | None = None


@dataclass(frozen=True)
class PrefillChunk(Event):
    kind: ClassVar[str] = "prefill_chunk"
    turn: int
    stage: str
    start: int
    tokens: int
    done: int
    total: int
    ms: float


@dataclass(frozen=True)
class TokenDecoded(Event):
    kind: ClassVar[str] = "token"
    turn: int
    index: int
    token: int
    text: str
    ms: float


@dataclass(frozen=True)
class TurnFinished(Event):
    kind: ClassVar[str] = "turn_finished"
    turn: int
    result: TurnResult
    tape: int = 0  # tokens on the tape after the turn (a stop text may have been cut off)


@dataclass(frozen=True)
class RuntimeCounted(Event):
    """The runtime's own account of the turn's last request beside effctx's count of what it
    submitted and read (runtimes that report one: openvino-genai's perf metrics)."""

    kind: ClassVar[str] = "runtime_counted"
    turn: int
    counts: RuntimeCounts
    agree: bool  # the record's verdict, written out for readers of the JSON


@dataclass(frozen=True)
class ResidencyAction(Event):
    """evict, park, slide (an evict while decoding) or shift, with the original tape range
    and the cache positions involved (for a shift: from where, to where)."""

    kind: ClassVar[str] = "residency_action"
    turn: int
    stage: str
    action: str
    start: int
    end: int
    pos_start: int
    pos_end: int
    ms: float


@dataclass(frozen=True)
class ResidencyChanged(Event):
    kind: ClassVar[str] = "residency"
    turn: int
    report: dict
    # The committed plan, block for block: (start, end, class label, reason name) runs.
    # The report counts tokens by class; a replay needs to know which blocks hold them
    # (empty in traces written before the plan was recorded).
    plan: tuple[tuple[int, int, str, str], ...] = ()


def plan_runs(table: BlockTable) -> tuple[tuple[int, int, str, str], ...]:
    """The table's classes and reasons as ResidencyChanged.plan records them: one run for
    each stretch of adjacent blocks with the same class and reason."""
    if not len(table):
        return ()
    key = table.cls.astype(np.int32) * 256 + table.reason
    first = np.flatnonzero(np.concatenate(([True], key[1:] != key[:-1])))
    last = np.append(first[1:], len(table)) - 1
    return tuple(
        (int(table.start[a]), int(table.end[b]), BlockClass(int(table.cls[a])).label, Reason(int(table.reason[a])).name.lower())
        for a, b in zip(first, last)
    )


@dataclass(frozen=True)
class PrefixCacheLookup(Event):
    kind: ClassVar[str] = "prefix_cache"
    result: str  # hit, partial, miss, off or recompute (PrefixLoad.cache)
    tokens: int
    ms: float
    key: str
    message: str
    restored: int = 0  # tokens restored (all on a hit, some on a partial); absent in older traces


@dataclass(frozen=True)
class NodeAdded(Event):
    kind: ClassVar[str] = "node"
    node: str
    parent: str
    tokens: int
    blob: str
    message: str
    # The endpoint's conversation the node's request belongs to, so a replay can group the
    # requests as the live tree did ("" for a console node, and in traces written before).
    conversation: str = ""
    # Its label, so a replay names it as the live tree did: a request's node by its
    # conversation ("c2 · user: …"), which names the conversation ("" in traces written
    # before: a replay names the node by its turn's input).
    label: str = ""


@dataclass(frozen=True)
class NodeUnsaved(Event):
    """A node's state, written in the background after the node was added, did not reach
    the store (a full disk): the node has no state now, and a restore of it recomputes."""

    kind: ClassVar[str] = "node_unsaved"
    node: str
    blob: str
    message: str


@dataclass(frozen=True)
class NodeRestored(Event):
    kind: ClassVar[str] = "node_restore"
    node: str
    mode: str  # exact or recompute
    tokens: int
    recomputed: int
    ms: float
    reason: str


@dataclass(frozen=True)
class RequestRouted(Event):
    """Where a request (a whole prompt from a client) started: the route the engine chose
    among the resident tape, stored states and nothing, and the prompt tokens it shared."""

    kind: ClassVar[str] = "request_routed"
    turn: int  # the turn that serves the request
    route: str  # a RouteKind value
    shared: int
    prompt_tokens: int
    key: str = ""  # the store entry restored
    node: str = ""  # the tree node holding that entry
    ms: float = 0.0  # the restore
    reason: str = ""  # why a stored state was not used, when one was refused
    request: str = ""  # the endpoint's id of the request ("" for the engine's own callers)


@dataclass(frozen=True)
class RequestQueued(Event):
    """A client's request joined the engine's queue."""

    kind: ClassVar[str] = "request_queued"
    request: str
    endpoint: str  # "chat" or "completion"
    ahead: int  # requests queued or running before it


@dataclass(frozen=True)
class RequestServed(Event):
    """What a client's request came to: its prompt, what of it was reused and from where,
    where and why it left its conversation, and what it cost."""

    kind: ClassVar[str] = "request_served"
    request: str
    status: str  # "done", "cancelled" (the client left) or "failed"
    endpoint: str = "chat"
    conversation: str = ""  # "" for a text completion
    turn: int = 0  # the engine turn that served it (0: none ran)
    prompt_tokens: int = 0
    reused: int = 0
    computed: int = 0
    dropped: int = 0
    route: str = ""  # a RouteKind value
    node: str = ""  # the stored state's node a restore started from
    finish: str = ""  # the OpenAI finish_reason
    ttft_ms: float | None = None
    prefill_ms: float = 0.0
    prefill_tps: float = 0.0
    decode_tps: float = 0.0
    generated: int = 0
    queue_ms: float = 0.0  # from joining the queue to its turn starting
    # (label, message index, role, start, end): the prompt's token ranges.
    segments: tuple[tuple, ...] = ()
    divergence: dict | None = None  # see api.conversations.Divergence.to_json
    # The diverging segment as the conversation's last request had it and as this prompt has it.
    versions: dict | None = None
    # Prompt tokens a prompt that kept the conversation's start would have left to compute.
    stable_computed: int | None = None
    error: str = ""  # the one line a failed request was answered with
    label: str = ""  # the last message, as the tree's node names it


@dataclass(frozen=True)
class CellSwapped(Event, CellResidency):
    kind: ClassVar[str] = "swap"
    old_profile: str
    new_profile: str
    mode: str  # exact or recompute
    tokens: int
    recomputed: int
    ms: float
    reason: str
    backend: str
    n_ctx: int
    identity: str
    details: str = ""  # the runtime-identity fields that differ ("" in traces written before)
    model: str = ""  # the model's name ("" in traces written before)


@dataclass(frozen=True)
class SwapAbandoned(Event):
    """A swap cancelled during its recompute: the new cell was closed, the old one kept
    its `tokens`; the prefill chunks before this event belonged to the closed cell."""

    kind: ClassVar[str] = "swap_cancelled"
    old_profile: str
    new_profile: str
    done: int
    total: int
    tokens: int
    ms: float


@dataclass(frozen=True)
class SnapshotTaken(Event):
    kind: ClassVar[str] = "snapshot"
    tokens: int
    bytes: int
    ms: float


@dataclass(frozen=True)
class SnapshotRestored(Event):
    kind: ClassVar[str] = "restore"
    tokens: int
    bytes: int
    ms: float


@dataclass(frozen=True)
class ErrorRaised(Event):
    kind: ClassVar[str] = "error"
    error: str
    message: str


class TraceWriteError(EffctxError):
    """The trace could not be written (the work itself went on)."""


TRACE_HEAD = b'{"kind":"session_opened"'


def check_trace_target(path: Path) -> Path:
    """Refuse, before any work, a trace path that would lose data or cannot be written:
    an existing file that is not an effctx trace (a prompt, a session file) is never
    written over; an existing trace is replaced when the new one is complete."""
    path = check_output_file(path, "trace file")
    if not path.is_file():
        return path  # a character device such as /dev/null
    head = _head(path, "trace file")
    if head and head != TRACE_HEAD:
        raise UserFileError(f"{path} exists and is not an effctx trace: refusing to write over it")
    return path


def is_trace_file(path: Path) -> bool:
    """True for an existing regular file that starts as an effctx trace does."""
    return path.is_file() and _head(path, "file") == TRACE_HEAD


def _head(path: Path, what: str) -> bytes:
    with open_input(path, what) as f:
        return f.read(len(TRACE_HEAD))


class TraceWriter:
    """One JSON object per event, flushed per line so a crash loses at most one.

    A new file is written in place. An existing trace is replaced only by a complete
    one: the new events go to a hidden temp file beside it, renamed over it on close (a
    crash leaves them in `.NAME.PID-*.tmp` and the old trace as it was, until the next
    run writing that trace removes them). A device (/dev/null) is written directly.
    A failed write (a full disk) stops the trace, not the work: `error` says why.
    """

    def __init__(self, path: Path):
        self.path = check_trace_target(Path(path))
        self.error: str | None = None
        self._tmp: Path | None = None
        try:
            if self.path.is_file():
                sweep_dead_temps(self.path.parent, self.path.name)  # of runs killed before their close
                fd, self._tmp = create_temp_file(self.path)
                self._file: TextIO | None = os.fdopen(fd, "w", encoding="utf-8")
            else:
                self._file = self.path.open("w", encoding="utf-8")
        except OSError as exc:
            raise TraceWriteError(f"cannot write trace file {self.path}: {os_reason(exc)}") from None
        self._lock = threading.Lock()

    def __call__(self, event: Event) -> None:
        line = event.to_json()
        with self._lock:
            if self._file is None:
                return
            try:
                self._file.write(line + "\n")
                self._file.flush()
            except OSError as exc:
                self._fail(exc)

    def _fail(self, exc: OSError) -> None:
        self.error = f"trace file {self.path} not written: {os_reason(exc)}"
        file, self._file = self._file, None
        if file is not None:
            try:
                file.close()
            except OSError:
                pass
        if self._tmp is not None:
            self._tmp.unlink(missing_ok=True)

    def close(self) -> None:
        with self._lock:
            if self._file is None:
                return
            try:
                if self._tmp is not None:
                    os.fsync(self._file.fileno())
                self._file.close()
                self._file = None
                if self._tmp is not None:
                    os.replace(self._tmp, self.path)
                    self._tmp = None
            except OSError as exc:
                self._fail(exc)
