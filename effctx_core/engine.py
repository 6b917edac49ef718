"""SessionEngine: the one object the CLI and the console talk to.

A turn asks the backend to make the whole tape so far resident (ensure_prefix, which
reuses every earlier turn that is still there), prefills the new input and decodes.
Every step is an event for subscribers and, when asked, for a JSON Lines trace.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from .backends.registry import get_backend
from .cancel import Cancelled
from .contract import (
    ContextOverflowError,
    UnsupportedFeatureError,
    ContextReport,
    DecodeConfig,
    EffctxError,
    ModelInfo,
    PrefillProgress,
    Session,
    SessionSnapshot,
    TurnResult,
)
from .profiles import DEFAULT_PROFILE, Profile
from .residency import BlockClass, ResidencyReport, Segment
from .residency.planners import PlannerCaps
from .residency.tracker import ResidencyTracker
from .trace import (
    CellSwapped,
    ErrorRaised,
    Event,
    NodeAdded,
    NodeRestored,
    PrefillChunk,
    PrefixCacheLookup,
    PrefixChecked,
    ResidencyAction,
    ResidencyChanged,
    SessionOpened,
    SnapshotRestored,
    SnapshotTaken,
    SwapAbandoned,
    TokenDecoded,
    TraceWriter,
    TurnFinished,
    TurnStarted,
)
from .snapshots.errors import SnapshotNotFoundError
from .snapshots.tree import SnapshotTree
from .transcript import chat_format_for

if TYPE_CHECKING:
    from .snapshots import SnapshotStore

Subscriber = Callable[[Event], None]


class PrefillCancelled(Cancelled):
    def __init__(self, done: int, total: int):
        self.done, self.total = done, total
        super().__init__(f"prefill cancelled after {done} of {total} tokens")


class SwapCancelled(Cancelled):
    """A swap's recompute was cancelled: the new cell is closed, the old one kept."""


@dataclass(frozen=True)
class NodeRestore:
    node: str
    mode: str  # "exact" (its saved state) or "recompute" (its tokens prefilled again)
    tokens: int
    recomputed: int  # tokens prefilled to get there
    ms: float
    reason: str


@dataclass(frozen=True)
class SwapResult:
    old_profile: str
    new_profile: str
    mode: str  # "exact" (state carried over) or "recompute" (the tape prefilled again)
    tokens: int
    recomputed: int
    ms: float
    reason: str


@dataclass(frozen=True)
class PrefixLoad:
    """How a stable prefix became resident: restored from the prefix cache or prefilled."""

    cache: str  # "hit", "miss" or "off"
    tokens: int
    ms: float
    key: str | None
    message: str | None  # one line: a refused cache entry, or a cache that could not be written


def _rate(tokens: int, ms: float) -> float:
    return tokens / (ms / 1000.0) if ms > 0 and tokens else 0.0


class SessionEngine:
    def __init__(
        self,
        model_path: str | Path,
        profile: Profile = DEFAULT_PROFILE,
        trace_path: str | Path | None = None,
        prefix_cache: "SnapshotStore | None" = None,
        checkpoints: "SnapshotStore | None" = None,
    ):
        self.model_path = Path(model_path)
        self.profile = profile
        self._backend = get_backend(profile.backend)
        self._subscribers: list[Subscriber] = []
        self._trace = TraceWriter(Path(trace_path)) if trace_path else None
        self._session: Session | None = None
        self._tape: list[int] = []
        self._prefix_cache = prefix_cache
        # Where the state of every turn's node goes; None keeps the tree without states
        # (a restore then recomputes).
        self._checkpoints = checkpoints
        self.tree = SnapshotTree()
        self._tracker: ResidencyTracker | None = None
        self._executor = None
        self._turns = 0
        self._lock = threading.RLock()
        self._cancel = threading.Event()
        self._cancellable = False
        self._t0 = time.perf_counter()
        self._started_wall = time.time()

    # ------------------------------------------------------------------ events

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        self._subscribers.append(subscriber)
        return lambda: self._subscribers.remove(subscriber)

    def _emit(self, event_type: type[Event], **fields) -> None:
        event = event_type(**fields, t_ms=round((time.perf_counter() - self._t0) * 1000, 3))
        if self._trace is not None:
            self._trace(event)
        for subscriber in list(self._subscribers):
            subscriber(event)

    # ------------------------------------------------------------------ lifecycle

    def open(self) -> ModelInfo:
        with self._lock:
            if self._session is None:
                session, self._tracker, self._executor = self._open_cell(self._backend, self.profile)
                self._session = session
                info = session.info
                self.tree.add(None, (), "root", info.identity.digest(), label="start")
                self._emit(
                    SessionOpened,
                    backend=info.backend,
                    model=info.facts.name,
                    n_ctx=info.n_ctx,
                    identity=info.identity.digest(),
                    policy=self.profile.residency.policy,
                    block_size=self.profile.residency.block_size,
                    budget=self.profile.budget_tokens,
                    started=round(self._started_wall, 3),
                )
            return self._session.info

    def _open_cell(self, backend, profile: Profile) -> tuple[Session, ResidencyTracker, object]:
        """A session of `profile` with its residency tracker and executor, or an error
        and nothing left open."""
        session = backend.open(self.model_path, profile)
        try:
            caps = PlannerCaps(attention_scores=False)
            config = profile.residency
            if config.policy == "scored" and not caps.attention_scores:
                raise UnsupportedFeatureError(
                    f"the scored policy needs attention scores, and the {session.info.backend} backend does not supply them"
                )
            executor = backend.residency_executor(session)
            executor.check_supported(config.policy)
        except EffctxError:
            session.close()
            raise
        return session, ResidencyTracker(config, profile.budget_tokens, caps), executor

    def swap(self, profile: Profile) -> "SwapResult":
        """Move the running conversation to another cell (profile, backend).

        The new session is opened first; the tape goes over exactly (the old state
        restored) when the runtime identity allows it, otherwise it is recomputed, which
        is reported with its cost. Only then is the old session closed, so a recompute
        can be cancelled (`cancel`): the new session is closed and the conversation stays
        where it was. The tree is kept either way.
        """
        with self._lock:
            old = self.session
            before = (self._session, self._tracker, self._executor, self._backend, self.profile, self._tape)
            backend = get_backend(profile.backend)
            t0 = time.perf_counter_ns()
            self._cancel.clear()  # an Esc pressed before the swap began is not for it
            session, tracker, executor = self._open_cell(backend, profile)
            tape = list(self._tape)
            try:
                if session.info.identity == old.info.identity and not self.residency.evicts:
                    session.restore(old.snapshot())
                    if list(session.tokens) != tape:
                        session.ensure_prefix(tape)  # a stop text the tape had dropped
                    mode, recomputed = "exact", 0
                    reason = "same runtime identity: the state was carried over"
                else:
                    diff = ", ".join(f"{n} {a!r} -> {b!r}" for n, a, b in old.info.identity.differences(session.info.identity))
                    mode, reason = "recompute", f"another runtime identity ({diff or 'residency policy'})"
                    recomputed = len(tape)
                self._session, self._tracker, self._executor = session, tracker, executor
                self._backend, self.profile = backend, profile
                if mode == "recompute":
                    self._tape = []
                    self._cancellable = True
                    self._prefill(tape, Segment.OTHER, self._turns, 0)
                else:
                    tracker.reset(Segment.OTHER, len(tape))
            except EffctxError as exc:
                self._session, self._tracker, self._executor, self._backend, self.profile, self._tape = before
                session.close()
                if not isinstance(exc, PrefillCancelled):
                    raise
                ms = (time.perf_counter_ns() - t0) / 1e6
                self._emit(SwapAbandoned, old_profile=self.profile.name, new_profile=profile.name,
                           done=exc.done, total=exc.total, tokens=len(self._tape), ms=round(ms, 3))
                raise SwapCancelled(
                    f"swap to {profile.name} cancelled after recomputing {exc.done} of {exc.total} tokens; "
                    f"still on {self.profile.name}"
                ) from None
            finally:
                self._cancellable = False
            old.close()
            result = SwapResult(before[4].name, profile.name, mode, len(tape), recomputed,
                                (time.perf_counter_ns() - t0) / 1e6, reason)
            info = session.info
            self._emit(CellSwapped, old_profile=result.old_profile, new_profile=result.new_profile, mode=mode,
                       tokens=result.tokens, recomputed=recomputed, ms=round(result.ms, 3), reason=reason,
                       backend=info.backend, n_ctx=info.n_ctx, identity=info.identity.digest())
            return result

    @property
    def session(self) -> Session:
        if self._session is None:
            raise EffctxError("the engine has no open session")
        return self._session

    @property
    def info(self) -> ModelInfo:
        return self.session.info

    @property
    def tape(self) -> tuple[int, ...]:
        return tuple(self._tape)

    @property
    def residency(self) -> ResidencyTracker:
        if self._tracker is None:
            raise EffctxError("the engine has no open session")
        return self._tracker

    def residency_report(self) -> ResidencyReport:
        return self.residency.report()

    def close(self) -> None:
        with self._lock:
            if self._session is not None:
                self._session.close()
                self._session = None
            if self._trace is not None:
                self._trace.close()
                self._trace = None

    def reset(self) -> None:
        """Start a new conversation. The cache is cleared by the next turn's
        ensure_prefix, which reports the old tokens as dropped."""
        with self._lock:
            self._tape = []
            if self._tracker is not None:
                self._tracker.reset()

    def cancel(self) -> None:
        """Stop the running turn (its prefill between two chunks, its decode after the
        current token) or a swap's recompute."""
        self._cancel.set()

    # ------------------------------------------------------------------ turns

    def complete(self, prompt: str, config: DecodeConfig = DecodeConfig()) -> TurnResult:
        """Raw completion: the prompt text is appended to the tape as it is."""
        session = self.session
        new = session.tokenize(prompt, add_bos=not self._tape and session.info.facts.add_bos)
        return self._turn(prompt, new, config, stop=config.stop, kind=Segment.USER)

    def chat(self, user_text: str, config: DecodeConfig = DecodeConfig()) -> TurnResult:
        """A conversation turn in the model's chat format."""
        session = self.session
        fmt = chat_format_for(session.info.facts)
        first = not self._tape
        new = session.tokenize(fmt.render_turn(user_text, first), add_bos=first and session.info.facts.add_bos)
        return self._turn(user_text, new, config, stop=tuple(config.stop) + fmt.stop, kind=Segment.USER)

    def _turn(self, input_text: str, new: list[int], config: DecodeConfig, stop: tuple[str, ...], kind: Segment) -> TurnResult:
        with self._lock:
            try:
                return self._run_turn(input_text, new, config, stop, kind)
            except EffctxError as exc:
                self._emit(ErrorRaised, error=type(exc).__name__, message=str(exc))
                raise

    def _run_turn(self, input_text: str, new: list[int], config: DecodeConfig, stop: tuple[str, ...], kind: Segment) -> TurnResult:
        session, tracker = self.session, self.residency
        self._cancel.clear()
        self._turns += 1
        turn = self._turns
        n_ctx = session.info.n_ctx
        cached = tracker.resident_tokens(self._tape)
        if tracker.evicts:
            config = replace(config, slide=True, stop=())
        else:
            room = n_ctx - len(cached) - len(new)
            if room < 0:
                raise ContextOverflowError("prefill", len(cached), len(new), n_ctx)
            config = replace(config, max_tokens=min(config.max_tokens, room), stop=())
        self._emit(TurnStarted, turn=turn, input_text=input_text, prefix_tokens=len(cached), suffix_tokens=len(new))
        before = tracker.report()
        evicted_before = before.evicted_tokens + before.cold_tokens
        t_start = time.perf_counter_ns()
        # A turn's own prefill stops on cancel (so does a swap's, which can be undone);
        # a restore that recomputes must finish, or the conversation would be left half moved.
        self._cancellable = True
        try:
            prefix = session.ensure_prefix(cached, self._progress(turn, 0))
            self._emit(
                PrefixChecked, turn=turn, reused=prefix.reused, prefilled=prefix.prefilled,
                dropped=prefix.dropped, resident=prefix.resident, reason=prefix.reason,
            )
            suffix_prefilled = self._prefill(new, kind, turn, prefix.resident)
        except PrefillCancelled as stop:
            return self._cancelled_turn(turn, input_text, stop, t_start)
        finally:
            self._cancellable = False
        t_prefilled = time.perf_counter_ns()

        pieces: list[str] = []
        generated: list[int] = []
        stop_reason = "max_tokens" if config.max_tokens == 0 else "cancelled"
        t_first = None
        text = ""
        cut = None
        if config.max_tokens > 0:
            decoder = session.decode(config)
            try:
                for chunk in decoder:
                    if t_first is None:
                        t_first = time.perf_counter_ns()
                    if chunk.stop_reason == "eog":
                        stop_reason = "eog"
                        break
                    generated.append(chunk.token)
                    self._tape.append(chunk.token)
                    pieces.append(chunk.text)
                    text += chunk.text
                    self._emit(TokenDecoded, turn=turn, index=chunk.index, token=chunk.token, text=chunk.text, ms=chunk.ms)
                    if tracker.evicts:
                        # The token is evaluated when the loop resumes the decoder:
                        # slide the window first if it would not fit, making room for
                        # slide_tokens at once.
                        if tracker.plan(1) is not None:
                            self._make_room(self.profile.residency.slide_tokens, turn, "decode")
                        tracker.append(Segment.ASSISTANT, 1, turn)
                    cut = _stop_cut(text, stop)
                    if cut is not None:
                        stop_reason = "stop"
                        break
                    if chunk.stop_reason:
                        # Not a break: the backend evaluates this last token when the
                        # loop resumes it, so the cache holds the whole tape afterwards.
                        stop_reason = chunk.stop_reason
                        continue
                    if self._cancel.is_set():
                        stop_reason = "cancelled"
                        break
            finally:
                decoder.close()
        t_end = time.perf_counter_ns()
        if not tracker.evicts:
            tracker.append(Segment.ASSISTANT, len(generated), turn)
        if cut is not None:
            keep = _tokens_before(pieces, cut)
            drop = len(generated) - keep
            text = "".join(pieces[:keep])
            # The stop text stays in the cache until the next turn's ensure_prefix
            # drops it, which reports it as dropped.
            if drop:
                del self._tape[-drop:]
                tracker.truncate(len(self._tape))
        prefilled = prefix.prefilled + suffix_prefilled
        prefill_ms = (t_prefilled - t_start) / 1e6
        ttft_ms = ((t_first or t_end) - t_start) / 1e6
        decode_ms = (t_end - t_first) / 1e6 if t_first else 0.0
        report = session.explain()
        residency = tracker.report()
        result = TurnResult(
            text=text,
            stop_reason=stop_reason,
            reused=prefix.reused,
            prefilled=prefilled,
            generated=len(generated),
            dropped=prefix.dropped,
            evicted=residency.evicted_tokens + residency.cold_tokens - evicted_before,
            prefix_reason=prefix.reason,
            ttft_ms=ttft_ms,
            prefill_ms=prefill_ms,
            decode_ms=decode_ms,
            prefill_tps=_rate(prefilled, prefill_ms),
            decode_tps=_rate(len(generated), decode_ms),
            resident=report.resident_tokens,
            available=report.available_tokens,
            n_ctx=report.n_ctx,
        )
        self._emit(TurnFinished, turn=turn, result=result, tape=len(self._tape))
        self._checkpoint("turn", _label(input_text, "turn"), f"{input_text}\n{result.text}", {
            "reused": result.reused, "prefilled": result.prefilled, "generated": result.generated,
            "ttft_ms": round(result.ttft_ms, 3), "prefill_tps": round(result.prefill_tps, 2),
            "decode_tps": round(result.decode_tps, 2),
        })
        return result

    def mark(self, label: str = "") -> str:
        """A node for the tape as it is now, on demand; returns its id."""
        with self._lock:
            self._checkpoint("manual", label or "mark", None, {})
            return self.tree.current

    def _checkpoint(self, kind: str, label: str, text: str | None, metrics: dict, known_blob: str | None = None) -> None:
        """A node for the tape as it is now, with the session's state when there is a store.

        Under an evicting policy the cache holds only part of the tape, so no state is
        saved: a restore of such a node recomputes its tokens."""
        session = self.session
        # The deepest node whose tape this one extends: the node the turn started from,
        # or, after a restore, the node restored.
        parent = self.tree.find_by_tape(self._tape) or self.tree.root
        if self.tree.tape_length(parent.id) == len(self._tape):
            self.tree.set_current(parent.id)  # the turn arrived at a node that exists
            return
        blob, state_bytes, message = known_blob, 0, None
        if blob is None and self._checkpoints is not None and not self.residency.evicts:
            from .snapshots import SnapshotError, save_snapshot

            try:
                snap = session.snapshot()
                blob = save_snapshot(self._checkpoints, snap, meta={"kind": kind}).key
                state_bytes = len(snap.state)
            except SnapshotError as exc:
                message = f"state not saved ({exc}); restoring this node will recompute it"
        node = self.tree.add_tape(
            parent.id, self._tape, kind, session.info.identity.digest(), label=label,
            residency=self.residency.report().to_dict(), metrics={**metrics, "bytes": state_bytes},
            blob=blob, text=text,
        )
        self._emit(NodeAdded, node=node.id, parent=node.parent or "", tokens=len(self._tape), blob=blob or "",
                   message=message or "")

    def save_session(self, name: str) -> Path:
        """Save the tree as a named session; the store keeps every state it references
        (and lets go of the states this session referenced before and no longer does)."""
        with self._lock:
            path = self.tree.save(name)
            if self._checkpoints is not None:
                owner = session_owner(name)
                self._checkpoints.remove_refs(owner)
                for key in sorted(self.tree.blobs()):
                    try:
                        self._checkpoints.add_ref(key, owner)
                    except SnapshotNotFoundError:
                        pass  # evicted before the tree was saved: that node will recompute
            return path

    def load_session(self, name: str) -> "NodeRestore | None":
        """Open a saved session's tree and go to its current node."""
        with self._lock:
            tree = SnapshotTree.load(name)
            self.tree = tree
            self.reset()
            return self.restore_node(tree.current) if tree.current is not None else None

    def restore_node(self, node_id: str) -> "NodeRestore":
        """Go back to a node: its exact state when it has one this runtime can load,
        otherwise its tokens recomputed. The next turn then branches from it."""
        from .snapshots import SnapshotError, load_snapshot

        with self._lock:
            session, tree = self.session, self.tree
            node = tree.node(node_id)
            tape = list(tree.tape(node_id))
            t0 = time.perf_counter_ns()
            mode, reason = "recompute", "the node has no saved state"
            store = self._checkpoints
            if node.blob is not None and store is not None:
                try:
                    snapshot = load_snapshot(store, node.blob, session.info.identity)
                    session.restore(snapshot)
                    mode, reason = "exact", "restored its saved state"
                except SnapshotError as exc:
                    reason = f"its saved state is unusable ({exc})"
            elif node.identity_digest != session.info.identity.digest():
                reason = "it was made by another runtime identity"
            if mode == "exact" and list(session.tokens) != tape:
                # the state held a stop text the tape had dropped: cut it off
                session.ensure_prefix(tape)
            recomputed = 0
            if mode == "recompute" and self.residency.evicts:
                # Streamed through the policy again: the map is the one this recompute made.
                session.ensure_prefix([])
                self._tape = []
                self.residency.reset()
                self._prefill(tape, Segment.OTHER, self._turns, 0)
                recomputed = len(tape)
            else:
                if mode == "recompute":
                    recomputed = session.ensure_prefix(tape, self._progress(self._turns, 0)).prefilled
                self._tape = tape
                self.residency.reset(Segment.OTHER, len(tape))
            tree.set_current(node_id)
            restore = NodeRestore(node_id, mode, len(tape), recomputed, (time.perf_counter_ns() - t0) / 1e6, reason)
            self._emit(NodeRestored, node=node_id, mode=mode, tokens=len(tape), recomputed=recomputed,
                       ms=round(restore.ms, 3), reason=reason)
            return restore

    def _cancelled_turn(self, turn: int, input_text: str, stop: "PrefillCancelled", t_start: int) -> TurnResult:
        report = self.session.explain()
        ms = (time.perf_counter_ns() - t_start) / 1e6
        result = TurnResult(
            text="", stop_reason="cancelled", reused=0, prefilled=stop.done, generated=0, dropped=0, evicted=0,
            prefix_reason=f"cancelled during prefill after {stop.done} of {stop.total} tokens", ttft_ms=ms,
            prefill_ms=ms, decode_ms=0.0, prefill_tps=_rate(stop.done, ms), decode_tps=0.0,
            resident=report.resident_tokens, available=report.available_tokens, n_ctx=report.n_ctx,
        )
        self._emit(TurnFinished, turn=turn, result=result, tape=len(self._tape))
        return result

    def _prefill(self, new: list[int], kind: Segment, turn: int, resident: int) -> int:
        """Prefill the new tokens; under an evicting policy in chunks, planning before each,
        so a prompt longer than the budget streams through instead of failing."""
        session, tracker = self.session, self.residency
        if not tracker.evicts:
            status = session.prefill_suffix(new, self._progress(turn, resident))
            self._tape.extend(new)
            tracker.append(kind, len(new), turn)
            return status.prefilled
        window = self.profile.residency.recent_tokens or self.profile.residency.block_size
        step = max(1, min(self.profile.n_batch, window))
        prefilled = 0
        for off in range(0, len(new), step):
            chunk = new[off : off + step]
            self._make_room(len(chunk), turn, "prefill")
            status = session.prefill_suffix(chunk, self._progress(turn, session.explain().resident_tokens))
            prefilled += status.prefilled
            self._tape.extend(chunk)
            tracker.append(kind, len(chunk), turn)
        if not new:
            prefilled += session.prefill_suffix([]).prefilled
        return prefilled

    def _make_room(self, extra: int, turn: int, stage: str) -> None:
        """Ask the policy for a plan if `extra` more tokens would break the budget, and
        have the backend's executor carry it out."""
        tracker = self.residency
        planned = tracker.plan(extra)
        if planned is None:
            return
        current = tracker.table()
        demoted = tracker.demoted(planned)
        actions = self._executor.apply(current, planned, demoted)
        tracker.commit(planned)
        for act in actions:
            kind = "slide" if stage == "decode" and act.action == "evict" else act.action
            self._emit(ResidencyAction, turn=turn, stage=stage, action=kind, start=act.start, end=act.end,
                       pos_start=act.pos_start, pos_end=act.pos_end, ms=round(act.ms, 3))
            if act.shift:
                self._emit(ResidencyAction, turn=turn, stage=stage, action="shift", start=act.start, end=act.end,
                           pos_start=act.shifted_from, pos_end=act.shifted_from + act.shift, ms=0.0)
        self._emit(ResidencyChanged, turn=turn, report=tracker.report().to_dict())

    def load_prefix(self, text: str, kind: Segment = Segment.DOCUMENT) -> PrefixLoad:
        """Make a stable prefix (a system prompt, a document) resident at the start of the
        session: restored from the prefix cache when this runtime identity has stored
        exactly these tokens, else prefilled and stored for the next session. Its prefill
        can be cancelled (`cancel`), which leaves the session empty."""
        from .snapshots import SnapshotError, load_snapshot, save_snapshot

        with self._lock:
            session = self.session
            if self._tape:
                raise EffctxError("a prefix can only be loaded at the start of a session")
            tokens = session.tokenize(text, add_bos=session.info.facts.add_bos)
            identity = session.info.identity
            store = self._prefix_cache
            t0 = time.perf_counter_ns()
            message = None
            key = store.find(identity.digest(), tokens) if store is not None else None
            if key is not None:
                try:
                    session.restore(load_snapshot(store, key, identity))
                except SnapshotError as exc:
                    # A damaged entry is quarantined by the store; a foreign one is left.
                    message = f"prefix cache entry not used ({exc}); prefilling instead"
                    key = None
                else:
                    self._tape = list(tokens)
                    self.residency.reset(kind, len(tokens))
                    return self._prefix_loaded("hit", tokens, t0, key, None)
            self._cancel.clear()
            self._cancellable = True
            try:
                self._prefill(tokens, kind, 0, 0)
            except PrefillCancelled:
                # Nothing of the prefix counts: the next turn drops what was prefilled.
                self._tape = []
                self.residency.reset()
                raise
            finally:
                self._cancellable = False
            if store is None:
                return self._prefix_loaded("off", tokens, t0, None, message)
            if self.residency.report().resident_tokens < len(tokens):
                # The policy evicted part of it: the cache holds no state for the whole prefix.
                return self._prefix_loaded("miss", tokens, t0, None, message)
            try:
                key = save_snapshot(store, session.snapshot(), meta={"kind": "prefix", "text_chars": len(text)}).key
            except SnapshotError as exc:
                message = f"prefix cache not written ({exc}); running without it"
            return self._prefix_loaded("miss", tokens, t0, key, message)

    def _prefix_loaded(self, cache: str, tokens: list[int], t0: int, key: str | None, message: str | None) -> PrefixLoad:
        load = PrefixLoad(cache, len(tokens), (time.perf_counter_ns() - t0) / 1e6, key, message)
        self._checkpoint("prefix", f"prefix ({cache})", None, {"prefilled": 0 if cache == "hit" else len(tokens),
                                                               "reused": len(tokens) if cache == "hit" else 0,
                                                               "load_ms": round(load.ms, 3)}, known_blob=key)
        self._emit(PrefixCacheLookup, result=cache, tokens=load.tokens, ms=round(load.ms, 3), key=key or "", message=message or "")
        return load

    def set_budget(self, tokens: int) -> None:
        """Change the residency budget of the running session (the next plan uses it)."""
        if not 0 < tokens <= self.session.info.n_ctx:
            raise EffctxError(f"a budget must be between 1 and n_ctx {self.session.info.n_ctx}")
        self.residency.budget = tokens

    def recompute_cold(self) -> int:
        """Bring the cold blocks back by recomputing the tape from the first of them.

        Returns the tokens recomputed. The cache is cut back to the resident tokens before
        the first cold block, and everything after it in the tape is prefilled again;
        the policy then plans as usual, so a budget that is still too small parks again.
        """
        with self._lock:
            session, tracker = self.session, self.residency
            table = tracker.table()
            cold = table.ranges_of(BlockClass.COLD)
            if not cold:
                return 0
            first = cold[0][0]
            cached = tracker.resident_tokens(self._tape)
            keep = int(table.sizes[(table.start < first) & table.resident_mask()].sum())
            runs = tracker.segments_from(first)
            tail = self._tape[first:]
            turn = self._turns
            t0 = time.perf_counter_ns()
            # Cut the cache back to what precedes the first cold block; ensure_prefix
            # re-prefills those tokens instead if the cache cannot be cut there.
            session.ensure_prefix(cached[:keep], self._progress(turn, 0))
            self._tape = self._tape[:first]
            tracker.truncate(first)
            done = 0
            for kind, n, seg_turn in runs:
                self._prefill(tail[done : done + n], kind, seg_turn, session.explain().resident_tokens)
                done += n
            ms = (time.perf_counter_ns() - t0) / 1e6
            self._emit(ResidencyAction, turn=turn, stage="recompute", action="recompute", start=first,
                       end=first + len(tail), pos_start=keep, pos_end=keep + len(tail), ms=round(ms, 3))
            return len(tail)

    def _progress(self, turn: int, start: int) -> Callable[[PrefillProgress], None]:
        def report(p: PrefillProgress) -> None:
            self._emit(
                PrefillChunk, turn=turn, stage=p.stage, start=start + p.done - p.chunk_tokens,
                tokens=p.chunk_tokens, done=p.done, total=p.total, ms=round(p.ms, 3),
            )
            if self._cancellable and self._cancel.is_set() and p.done < p.total:
                # Between two chunks the cache is consistent: what is done stays resident
                # (past the tape, so the next turn drops it) and the turn ends here.
                raise PrefillCancelled(p.done, p.total)

        return report

    # ------------------------------------------------------------------ state

    def snapshot(self) -> SessionSnapshot:
        with self._lock:
            t0 = time.perf_counter_ns()
            snap = self.session.snapshot()
            self._emit(SnapshotTaken, tokens=snap.n_tokens, bytes=len(snap.state), ms=(time.perf_counter_ns() - t0) / 1e6)
            return snap

    def restore(self, snapshot: SessionSnapshot) -> None:
        with self._lock:
            t0 = time.perf_counter_ns()
            try:
                self.session.restore(snapshot)
            except EffctxError as exc:
                self._emit(ErrorRaised, error=type(exc).__name__, message=str(exc))
                raise
            self._tape = list(snapshot.tokens)
            self.residency.reset(Segment.OTHER, snapshot.n_tokens)
            self._emit(SnapshotRestored, tokens=snapshot.n_tokens, bytes=len(snapshot.state), ms=(time.perf_counter_ns() - t0) / 1e6)

    def explain(self) -> ContextReport:
        return self.session.explain()

    def detokenize(self, tokens) -> str:
        return self.session.detokenize(tokens)


def _label(text: str, fallback: str) -> str:
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first[:40] or fallback


def session_owner(name: str) -> str:
    """The snapshot-store owner name under which a saved session keeps its states."""
    return f"session-{name}"


def _stop_cut(text: str, stop: tuple[str, ...]) -> int | None:
    hits = [i for s in stop if (i := text.find(s)) >= 0]
    return min(hits) if hits else None


def _tokens_before(pieces: list[str], cut: int) -> int:
    """How many leading tokens end at or before character `cut`."""
    end = 0
    for i, piece in enumerate(pieces):
        end += len(piece)
        if end > cut:
            return i
    return len(pieces)

