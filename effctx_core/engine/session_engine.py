"""SessionEngine: the one object the CLI and the console talk to.

A turn asks the backend to make the whole tape so far resident (ensure_prefix, which
reuses every earlier turn that is still there), prefills the new input and decodes.
Every step is an event for subscribers and, when asked, for a JSON Lines trace.

This module holds the session's life and its turns; the snapshot tree's operations,
prefix loading and swaps to another cell are mixed in from engine_tree, engine_prefix
and engine_swap, and the records they return live in engine_records.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from effctx_core.backends.registry import get_backend
from effctx_core.errors import ContextOverflowError, UnsupportedFeatureError, EffctxError
from effctx_core.contract import (
    ContextReport,
    DecodeConfig,
    ModelInfo,
    PrefillProgress,
    Session,
    SessionSnapshot,
    TurnResult,
)
from effctx_core.profiles import BUDGET_POLICIES, DEFAULT_PROFILE, Profile
from effctx_core.residency import BlockClass, ResidencyReport, Segment
from effctx_core.residency.planners import PlannerCaps
from effctx_core.residency.tracker import ResidencyTracker
from effctx_core.events.trace import (
    ErrorRaised,
    Event,
    PrefillChunk,
    PrefixChecked,
    ResidencyAction,
    ResidencyChanged,
    SessionOpened,
    SnapshotRestored,
    SnapshotTaken,
    TokenDecoded,
    TraceWriter,
    TurnFinished,
    TurnStarted,
)
from effctx_core.snapshots.tree import SnapshotTree
from effctx_core.engine.prefix_loader import PrefixLoading
from effctx_core.engine.records import PrefillCancelled
from effctx_core.engine.swap import CellSwapping
from effctx_core.engine.checkpoints import TreeOperations
from effctx_core.transcript import chat_format_for

if TYPE_CHECKING:
    from effctx_core.snapshots import SnapshotStore

Subscriber = Callable[[Event], None]


def _rate(tokens: int, ms: float) -> float:
    return tokens / (ms / 1000.0) if ms > 0 and tokens else 0.0


class SessionEngine(CellSwapping, TreeOperations, PrefixLoading):
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
        self._trace_error: str | None = None
        self._session: Session | None = None
        self._tape: list[int] = []
        self._prefix_cache = prefix_cache
        # Where the state of every turn's node goes; None keeps the tree without states
        # (a restore then recomputes).
        self._checkpoints = checkpoints
        self._made_blobs: set[str] = set()  # states this engine saved, until a save lets go of them
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
        event = event_type(**fields, t_ms=self._elapsed_ms())
        if self._trace is not None:
            self._trace(event)
            self._check_trace()
        for subscriber in list(self._subscribers):
            subscriber(event)

    def _elapsed_ms(self) -> float:
        return round((time.perf_counter() - self._t0) * 1000, 3)

    def _check_trace(self) -> None:
        """A trace that stopped being written is said once, to the subscribers (the
        console shows it); the work goes on, and `trace_error` keeps the reason."""
        if self._trace is not None and self._trace.error and self._trace_error is None:
            self._trace_error = self._trace.error
            event = ErrorRaised(error="TraceWriteError", message=self._trace_error, t_ms=self._elapsed_ms())
            for subscriber in list(self._subscribers):
                subscriber(event)

    @property
    def trace_error(self) -> str | None:
        return self._trace_error

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
                self._check_trace()
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
        opened = not first and session.detokenize(self._tape[-8:]).endswith(fmt.turn_opening)
        new = session.tokenize(fmt.render_turn(user_text, first, opened), add_bos=first and session.info.facts.add_bos)
        return self._turn(user_text, new, config, stop=tuple(config.stop) + fmt.stop, kind=Segment.USER,
                          opening=fmt.turn_opening)

    def _turn(self, input_text: str, new: list[int], config: DecodeConfig, stop: tuple[str, ...], kind: Segment,
              opening: str | None = None) -> TurnResult:
        with self._lock:
            try:
                return self._run_turn(input_text, new, config, stop, kind, opening)
            except EffctxError as exc:
                self._emit(ErrorRaised, error=type(exc).__name__, message=str(exc))
                raise

    def _run_turn(self, input_text: str, new: list[int], config: DecodeConfig, stop: tuple[str, ...], kind: Segment,
                  opening: str | None) -> TurnResult:
        session, tracker = self.session, self.residency
        self._cancel.clear()
        self._turns += 1
        turn = self._turns
        n_ctx = session.info.n_ctx
        cached = tracker.resident_tokens(self._tape)
        asked_tokens = config.max_tokens
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
        if config.max_tokens > 0:
            stop_reason = "cancelled"
        else:  # nothing to decode: asked for none, or the context has no room left
            stop_reason = "n_ctx" if asked_tokens > 0 else "max_tokens"
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
        if not tracker.evicts:
            tracker.append(Segment.ASSISTANT, len(generated), turn)
        if cut is not None:
            keep = _tokens_before(pieces, cut)
            # The reply is the text up to the stop, even where a token straddles it; the
            # tape can only keep whole tokens, so such a token goes with the stop text.
            text = text[:cut]
            # A reply that ends on exactly the next turn's opening keeps it on the tape,
            # its last token (sampled, not yet evaluated) decoded now: the next turn goes
            # on from it and reuses everything. Any other stop text stays in the cache
            # until the next turn's ensure_prefix drops it, which reports it as dropped.
            drop = 0 if "".join(pieces[keep:]) == opening else len(generated) - keep
            if drop:
                del self._tape[-drop:]
                tracker.truncate(len(self._tape))
            elif not tracker.evicts:
                session.ensure_prefix(self._tape)
        t_end = time.perf_counter_ns()
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

    def set_budget(self, tokens: int) -> None:
        """Steer the residency budget of the running session. A smaller budget is carried
        out at once (the policy parks blocks now); a larger one leaves room that the next
        tokens, or `recompute_cold`, fill."""
        with self._lock:
            policy = self.residency.policy
            if policy not in BUDGET_POLICIES:
                raise UnsupportedFeatureError(
                    f"the {policy} policy does not keep to a token budget; profiles with the budget policy do")
            if not 0 < tokens <= self.session.info.n_ctx:
                raise EffctxError(f"a budget must be between 1 and n_ctx {self.session.info.n_ctx}")
            self.residency.budget = tokens
            self._make_room(0, self._turns, "steer")

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

