"""One conversation turn: the tape made resident, the new input prefilled, a reply decoded.

A turn asks the backend to make the whole tape so far resident (ensure_prefix, which
reuses every earlier turn that is still there), prefills the new input and decodes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping, Sequence

from effctx_core.contract import DecodeConfig, PrefixStatus, TokenChunk
from effctx_core.engine.checkpoints import Checkpointer
from effctx_core.engine.prefill import make_room, prefill
from effctx_core.engine.records import PrefillCancelled
from effctx_core.engine.state import EngineState
from effctx_core.errors import ContextOverflowError
from effctx_core.events.trace import PrefixChecked, RuntimeCounted, TokenDecoded, TurnFinished, TurnResult, TurnStarted
from effctx_core.residency import ResidencyReport, Segment
from effctx_core.residency.tracker import SegmentRun
from effctx_core.snapshots.tree import TurnText
from effctx_core.units import ms_between, ms_since


def _rate(tokens: int, ms: float) -> float:
    return tokens / (ms / 1000.0) if ms > 0 and tokens else 0.0


def _gone(report: ResidencyReport) -> int:
    """Tokens of the tape the policy took out of the cache, evicted or parked."""
    return report.evicted_tokens + report.cold_tokens


@dataclass
class _Reply:
    """What the decode loop produced."""

    stop_reason: str
    tokens: list[int] = field(default_factory=list)
    pieces: list[str] = field(default_factory=list)
    text: str = ""
    t_first: int | None = None  # perf_counter_ns when the first token arrived
    cut: int | None = None  # where in `text` a stop string begins


@dataclass(frozen=True)
class TurnExtras:
    """What a request adds to a turn: its prompt's segments (system, tools, each message)
    in place of one kind, a callback per decoded token (a stream), and what its node in
    the tree records besides the turn's own figures."""

    runs: Sequence[SegmentRun] = ()  # cover the tape from its start to the prompt's end
    on_token: Callable[[TokenChunk], None] | None = None
    label: str | None = None
    # What the node records besides, from the finished turn (a client's reply as it will
    # send it back can only be known once the reply is).
    metrics: Callable[[TurnResult], Mapping[str, object]] | None = None


class TurnRunner:
    def __init__(self, state: EngineState, checkpointer: Checkpointer):
        self._state = state
        self._checkpointer = checkpointer

    def run(self, input_text: str, new: list[int], config: DecodeConfig, stop: tuple[str, ...], kind: Segment,
            opening: str | None, extras: TurnExtras = TurnExtras()) -> TurnResult:
        state = self._state
        session, tracker = state.session, state.tracker
        state.gate.clear()
        state.turns += 1
        turn = state.turns
        shared = state.take_left(new)
        if shared:
            state.tape.extend(new[:shared])
            tracker.append(kind, shared, turn)
            new = new[shared:]
        cached = tracker.resident_tokens(state.tape)
        fitted = self._fit(config, len(cached), len(new))
        state.bus.emit(TurnStarted, turn=turn, input_text=input_text, prefix_tokens=len(cached), suffix_tokens=len(new))
        gone_before = _gone(tracker.report())
        t_start = time.perf_counter_ns()
        try:
            with state.gate.cancellable():
                prefix = session.ensure_prefix(cached, state.progress(turn, 0))
                state.bus.emit(
                    PrefixChecked, turn=turn, reused=prefix.reused, prefilled=prefix.prefilled,
                    dropped=prefix.dropped, resident=prefix.resident, reason=prefix.reason, cause=prefix.cause.value,
                    diverged_at=prefix.diverged_at, rollback_floor=prefix.rollback_floor,
                )
                suffix_prefilled = prefill(state, new, kind, turn, prefix.resident)
        except PrefillCancelled as cancelled:
            if shared:  # the start kept from before belongs to the turn, which does not count
                del state.tape[:]
                tracker.truncate(0)
            return self._cancelled(turn, cancelled, t_start, shared)
        if extras.runs and not tracker.evicts:
            # The prompt went in as one kind; the tracker learns its real segments.
            tracker.truncate(0)
            for run in extras.runs:
                tracker.append(run.kind, run.tokens, turn)
        t_prefilled = time.perf_counter_ns()
        reply = self._decode(turn, fitted, stop, config.max_tokens, extras.on_token)
        self._settle(reply, opening)
        t_end = time.perf_counter_ns()
        result = self._result(reply, prefix, prefix.prefilled + suffix_prefilled, gone_before,
                              t_start, t_prefilled, t_end)
        state.bus.emit(TurnFinished, turn=turn, result=result, tape=len(state.tape))
        counts = session.explain().runtime_counts
        if counts is not None:
            state.bus.emit(RuntimeCounted, turn=turn, counts=counts, agree=counts.agree)
        said = TurnText(input_text, result.text)
        extra = extras.metrics(result) if extras.metrics is not None else {}
        self._checkpointer.checkpoint("turn", extras.label or said.label, said, {**extra,
            "reused": result.reused, "prefilled": result.prefilled, "generated": result.generated,
            "ttft_ms": None if result.ttft_ms is None else round(result.ttft_ms, 3), "prefill_tps": round(result.prefill_tps, 2),
            "decode_tps": round(result.decode_tps, 2),
        })
        return result

    def _fit(self, config: DecodeConfig, cached: int, new: int) -> DecodeConfig:
        """The decode settings the backend gets: an evicting policy slides instead of
        stopping at a full cache; otherwise the reply is cut to the room left, and input
        that does not fit at all is refused before anything changes. Stop strings are
        the engine's to find (they may straddle tokens), so the backend gets none."""
        if self._state.tracker.evicts:
            return replace(config, slide=True, stop=())
        n_ctx = self._state.session.info.n_ctx
        room = n_ctx - cached - new
        if room < 0:
            raise ContextOverflowError("prefill", cached, new, n_ctx)
        return replace(config, max_tokens=min(config.max_tokens, room), stop=())

    def _decode(self, turn: int, config: DecodeConfig, stop: tuple[str, ...], asked: int,
                on_token: Callable[[TokenChunk], None] | None) -> _Reply:
        state = self._state
        if config.max_tokens <= 0:  # nothing to decode: asked for none, or the context has no room left
            return _Reply("n_ctx" if asked > 0 else "max_tokens")
        reply = _Reply("cancelled")
        tracker = state.tracker
        decoder = state.session.decode(config)
        try:
            for chunk in decoder:
                if reply.t_first is None:
                    reply.t_first = time.perf_counter_ns()
                if chunk.stop_reason == "eog":
                    reply.stop_reason = "eog"
                    break
                reply.tokens.append(chunk.token)
                state.tape.append(chunk.token)
                reply.pieces.append(chunk.text)
                reply.text += chunk.text
                state.bus.emit(TokenDecoded, turn=turn, index=chunk.index, token=chunk.token, text=chunk.text,
                               ms=chunk.ms)
                if on_token is not None:
                    on_token(chunk)
                if tracker.evicts:
                    # The token is evaluated when the loop resumes the decoder: slide the
                    # window first if it would not fit, making room for slide_tokens at once.
                    if tracker.plan(1) is not None:
                        make_room(state, state.running.profile.residency.slide_tokens, turn, "decode")
                    tracker.append(Segment.ASSISTANT, 1, turn)
                reply.cut = _stop_cut(reply.text, stop)
                if reply.cut is not None:
                    reply.stop_reason = "stop"
                    break
                if chunk.stop_reason:
                    # Not a break: the backend ends the reply itself when the loop resumes
                    # it (a server's last event is read). The last token stays on the
                    # tape, pending where the runtime did not evaluate it.
                    reply.stop_reason = chunk.stop_reason
                    continue
                if state.gate.requested:
                    reply.stop_reason = "cancelled"
                    break
        finally:
            decoder.close()
        if not tracker.evicts:
            tracker.append(Segment.ASSISTANT, len(reply.tokens), turn)
        return reply

    def _settle(self, reply: _Reply, opening: str | None) -> None:
        """Cut the reply at its stop string and leave the tape and the cache in step."""
        if reply.cut is None:
            return
        state = self._state
        keep = _tokens_before(reply.pieces, reply.cut)
        # The reply is the text up to the stop, even where a token straddles it; the tape
        # can only keep whole tokens, so such a token goes with the stop text.
        reply.text = reply.text[:reply.cut]
        # A reply that ends on exactly the next turn's opening keeps it on the tape (its
        # last token pending, evaluated with the next turn's input): the next turn goes on
        # from it and reuses everything. Any other stop text stays in the cache until the
        # next turn's ensure_prefix drops it, which reports it as dropped.
        drop = 0 if "".join(reply.pieces[keep:]) == opening else len(reply.tokens) - keep
        if drop:
            del state.tape[-drop:]
            state.tracker.truncate(len(state.tape))

    def _result(self, reply: _Reply, prefix: PrefixStatus, prefilled: int, gone_before: int,
                t_start: int, t_prefilled: int, t_end: int) -> TurnResult:
        report = self._state.session.explain()
        prefill_ms = ms_between(t_start, t_prefilled)
        decode_ms = ms_between(reply.t_first, t_end) if reply.t_first else 0.0
        return TurnResult(
            text=reply.text,
            stop_reason=reply.stop_reason,
            reused=prefix.reused,
            prefilled=prefilled,
            generated=len(reply.tokens),
            dropped=prefix.dropped,
            evicted=_gone(self._state.tracker.report()) - gone_before,
            prefix_reason=prefix.reason,
            ttft_ms=ms_between(t_start, reply.t_first) if reply.t_first else None,
            prefill_ms=prefill_ms,
            decode_ms=decode_ms,
            prefill_tps=_rate(prefilled, prefill_ms),
            decode_tps=_rate(len(reply.tokens), decode_ms),
            resident=report.resident_tokens,
            available=report.available_tokens,
            n_ctx=report.n_ctx,
            prefix_cause=prefix.cause.value,
            pending=report.pending_tokens,
        )

    def _cancelled(self, turn: int, stop: PrefillCancelled, t_start: int, reused: int) -> TurnResult:
        state = self._state
        report = state.session.explain()
        ms = ms_since(t_start)
        result = TurnResult(
            text="", stop_reason="cancelled", reused=reused, prefilled=stop.done, generated=0, dropped=0, evicted=0,
            prefix_reason=f"cancelled during prefill after {stop.done} of {stop.total} tokens", ttft_ms=None,
            prefill_ms=ms, decode_ms=0.0, prefill_tps=_rate(stop.done, ms), decode_tps=0.0,
            resident=report.resident_tokens, available=report.available_tokens, n_ctx=report.n_ctx,
        )
        state.bus.emit(TurnFinished, turn=turn, result=result, tape=len(state.tape))
        return result


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
