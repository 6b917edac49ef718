"""SessionEngine: the one object the CLI and the console talk to.

A turn asks the backend to make the whole tape so far resident (ensure_prefix, which
reuses every earlier turn that is still there), prefills the new input and decodes.
Every step is an event for subscribers and, when asked, for a JSON Lines trace.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Callable

from .backends.registry import get_backend
from .contract import (
    ContextOverflowError,
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
from .trace import (
    ErrorRaised,
    Event,
    PrefillChunk,
    PrefixChecked,
    SessionOpened,
    SnapshotRestored,
    SnapshotTaken,
    TokenDecoded,
    TraceWriter,
    TurnFinished,
    TurnStarted,
)
from .transcript import chat_format_for

Subscriber = Callable[[Event], None]


def _rate(tokens: int, ms: float) -> float:
    return tokens / (ms / 1000.0) if ms > 0 and tokens else 0.0


class SessionEngine:
    def __init__(
        self,
        model_path: str | Path,
        profile: Profile = DEFAULT_PROFILE,
        trace_path: str | Path | None = None,
    ):
        self.model_path = Path(model_path)
        self.profile = profile
        self._backend = get_backend(profile.backend)
        self._subscribers: list[Subscriber] = []
        self._trace = TraceWriter(Path(trace_path)) if trace_path else None
        self._session: Session | None = None
        self._tape: list[int] = []
        self._turns = 0
        self._lock = threading.RLock()
        self._cancel = threading.Event()
        self._t0 = time.perf_counter()

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
                self._session = self._backend.open(self.model_path, self.profile)
                info = self._session.info
                self._emit(
                    SessionOpened,
                    backend=info.backend,
                    model=info.facts.name,
                    n_ctx=info.n_ctx,
                    identity=info.identity.digest(),
                )
            return self._session.info

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

    def cancel(self) -> None:
        """Stop the running decode after its current token."""
        self._cancel.set()

    # ------------------------------------------------------------------ turns

    def complete(self, prompt: str, config: DecodeConfig = DecodeConfig()) -> TurnResult:
        """Raw completion: the prompt text is appended to the tape as it is."""
        session = self.session
        new = session.tokenize(prompt, add_bos=not self._tape and session.info.facts.add_bos)
        return self._turn(prompt, new, config, stop=config.stop)

    def chat(self, user_text: str, config: DecodeConfig = DecodeConfig()) -> TurnResult:
        """A conversation turn in the model's chat format."""
        session = self.session
        fmt = chat_format_for(session.info.facts)
        first = not self._tape
        new = session.tokenize(fmt.render_turn(user_text, first), add_bos=first and session.info.facts.add_bos)
        return self._turn(user_text, new, config, stop=tuple(config.stop) + fmt.stop)

    def _turn(self, input_text: str, new: list[int], config: DecodeConfig, stop: tuple[str, ...]) -> TurnResult:
        with self._lock:
            try:
                return self._run_turn(input_text, new, config, stop)
            except EffctxError as exc:
                self._emit(ErrorRaised, error=type(exc).__name__, message=str(exc))
                raise

    def _run_turn(self, input_text: str, new: list[int], config: DecodeConfig, stop: tuple[str, ...]) -> TurnResult:
        session = self.session
        self._cancel.clear()
        self._turns += 1
        turn = self._turns
        n_ctx = session.info.n_ctx
        room = n_ctx - len(self._tape) - len(new)
        if room < 0:
            raise ContextOverflowError("prefill", len(self._tape), len(new), n_ctx)
        config = DecodeConfig(
            max_tokens=min(config.max_tokens, room),
            temperature=config.temperature,
            top_p=config.top_p,
            seed=config.seed,
        )
        self._emit(TurnStarted, turn=turn, input_text=input_text, prefix_tokens=len(self._tape), suffix_tokens=len(new))
        t_start = time.perf_counter_ns()
        prefix = session.ensure_prefix(self._tape, self._progress(turn, 0))
        self._emit(
            PrefixChecked, turn=turn, reused=prefix.reused, prefilled=prefix.prefilled,
            dropped=prefix.dropped, resident=prefix.resident, reason=prefix.reason,
        )
        suffix = session.prefill_suffix(new, self._progress(turn, prefix.resident))
        self._tape = list(session.tokens)
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
                    pieces.append(chunk.text)
                    text += chunk.text
                    self._emit(TokenDecoded, turn=turn, index=chunk.index, token=chunk.token, text=chunk.text, ms=chunk.ms)
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
        self._tape = list(session.tokens)
        if cut is not None:
            keep = _tokens_before(pieces, cut)
            drop = len(generated) - keep
            text = "".join(pieces[:keep])
            # The stop text stays in the cache until the next turn's ensure_prefix
            # drops it, which reports it as dropped.
            if drop:
                del self._tape[-drop:]
        prefilled = prefix.prefilled + suffix.prefilled
        prefill_ms = (t_prefilled - t_start) / 1e6
        ttft_ms = ((t_first or t_end) - t_start) / 1e6
        decode_ms = (t_end - t_first) / 1e6 if t_first else 0.0
        report = session.explain()
        result = TurnResult(
            text=text,
            stop_reason=stop_reason,
            reused=prefix.reused,
            prefilled=prefilled,
            generated=len(generated),
            dropped=prefix.dropped,
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
        self._emit(TurnFinished, turn=turn, result=result)
        return result

    def _progress(self, turn: int, start: int) -> Callable[[PrefillProgress], None]:
        def report(p: PrefillProgress) -> None:
            self._emit(
                PrefillChunk, turn=turn, stage=p.stage, start=start + p.done - p.chunk_tokens,
                tokens=p.chunk_tokens, done=p.done, total=p.total, ms=round(p.ms, 3),
            )

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
            self._emit(SnapshotRestored, tokens=snapshot.n_tokens, bytes=len(snapshot.state), ms=(time.perf_counter_ns() - t0) / 1e6)

    def explain(self) -> ContextReport:
        return self.session.explain()

    def detokenize(self, tokens) -> str:
        return self.session.detokenize(tokens)


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

