"""Timeline: what the engine's events say about speed and reuse, turn by turn.

Fed every engine event in order (`feed`), it keeps the series the timings screen draws
and explains each turn's cache hit or miss from the measured facts; an endpoint's
requests go to its RequestSeries (`requests`). It is pure data:
no engine, no UI. Two optional callables connect it to a live engine:

- `tape()` returns the engine's tape. The timeline reads it when a turn finishes and
  after a node restore, i.e. between turns, when the tape is what the next turn finds
  resident. A divergence is then shown against that tape and the one after the turn.
- `detokenize(tokens)` turns a few tokens around a divergence into text.

Without them the explanation still gives every number, only no text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from effctx_core.events.explain import turn_cause
from effctx_core.events.request_series import RequestSeries
from effctx_core.events.trace import (
    Event,
    NodeRestored,
    PrefillChunk,
    PrefixCacheLookup,
    PrefixChecked,
    RequestRouted,
    RequestServed,
    ResidencyChanged,
    TokenDecoded,
    TurnFinished,
    TurnStarted,
)

CONTEXT_TOKENS = 8  # tokens of text shown on each side of a divergence



@dataclass(frozen=True)
class ChunkPoint:
    turn: int
    stage: str  # "prefix" (earlier tape re-prefilled) or "prefill" (the new input)
    start: int  # cache position of the chunk's first token
    tokens: int
    ms: float

    @property
    def end(self) -> int:
        return self.start + self.tokens

    @property
    def tps(self) -> float | None:
        """Tokens per second; None when the chunk was not timed (a clock too coarse for it)."""
        return self.tokens / (self.ms / 1000.0) if self.ms > 0 and self.tokens else None


@dataclass(frozen=True)
class TokenPoint:
    turn: int
    seq: int  # decoded tokens before this one, session-wide
    gap_ms: float  # wall time since the turn's previous token: the eval of it plus this sample


@dataclass(frozen=True)
class Divergence:
    """Text around the token where the new prompt left the resident tape."""

    before: str  # the common text just before the divergence
    old: str  # what the cache held from there ("" when the tape ended there)
    new: str  # what the prompt has from there


@dataclass
class TurnRecord:
    turn: int
    input_text: str = ""
    prefix_tokens: int = 0  # tape tokens the turn asked to be resident
    suffix_tokens: int = 0  # the new input
    check: PrefixChecked | None = None
    result: TurnFinished | None = None
    chunks: list[ChunkPoint] = field(default_factory=list)
    tokens: list[TokenPoint] = field(default_factory=list)
    # what happened between the previous turn and this one
    restore: NodeRestored | None = None
    cache_lookup: PrefixCacheLookup | None = None
    request: RequestRouted | None = None  # the endpoint's request this turn served
    tape_before: tuple[int, ...] | None = None
    tape_after: tuple[int, ...] | None = None

    @property
    def finished(self) -> bool:
        return self.result is not None

    @property
    def reused(self) -> int:
        return self.result.result.reused if self.result else (self.check.reused if self.check else 0)

    @property
    def computed(self) -> int:
        """Tokens prefilled by the turn: earlier tape re-prefilled plus the new input."""
        if self.result:
            return self.result.result.prefilled
        return sum(c.tokens for c in self.chunks)

    @property
    def dropped(self) -> int:
        return self.check.dropped if self.check else 0

    @property
    def evicted(self) -> int:
        return self.result.result.evicted if self.result else 0

    @property
    def ttft_ms(self) -> float | None:
        """None until the turn finished, and for a turn that finished without a token."""
        return self.result.result.ttft_ms if self.result else None

    @property
    def diverged_at(self) -> int | None:
        """The first tape index the cache did not match, when the cache held something else there.

        The backend's check names it; after a rollback-limit refusal `reused` is 0
        although the divergence was further on."""
        if self.check is None or self.check.dropped == 0:
            return None
        return self.check.diverged_at if self.check.diverged_at is not None else self.check.reused


@dataclass(frozen=True)
class Explanation:
    turn: int
    cause: str
    reused: int
    computed: int
    recomputed: int  # of `computed`, tokens of the earlier tape
    dropped: int
    evicted: int
    diverged_at: int | None
    detail: str  # one sentence with the measured numbers
    divergence: Divergence | None


class Timeline:
    def __init__(
        self,
        detokenize: Callable[[Sequence[int]], str] | None = None,
        tape: Callable[[], Sequence[int]] | None = None,
    ) -> None:
        self._detokenize = detokenize
        self._tape = tape
        self.turns: dict[int, TurnRecord] = {}
        self.resident: list[tuple[float, int]] = []  # (t_ms, KV resident tokens)
        self.other_chunks: list[ChunkPoint] = []  # prefills outside a turn
        self.requests = RequestSeries()  # the endpoint's requests, when the engine serves one
        self.version = 0  # bumped by every event: a screen redraws when it changed
        self._decoded = 0
        self._last_token_ms: float | None = None
        self._pending_restore: NodeRestored | None = None
        self._pending_lookup: PrefixCacheLookup | None = None
        self._last_tape: tuple[int, ...] | None = None
        self._pending_request: RequestRouted | None = None

    # ------------------------------------------------------------------ feeding

    def note_tape(self, tokens: Sequence[int]) -> None:
        """The tape as it stands between turns: what the next turn will find resident."""
        self._last_tape = tuple(tokens)

    def feed(self, event: Event) -> None:
        self.version += 1
        if isinstance(event, TurnStarted):
            self.turns[event.turn] = TurnRecord(
                event.turn, event.input_text, event.prefix_tokens, event.suffix_tokens,
                restore=self._pending_restore, cache_lookup=self._pending_lookup, tape_before=self._last_tape,
                request=self._pending_request if self._pending_request and self._pending_request.turn == event.turn
                else None,
            )
            self._pending_restore = self._pending_lookup = self._pending_request = None
            self._last_token_ms = None
        elif isinstance(event, PrefixChecked):
            record = self._record(event.turn)
            record.check = event
            # The engine reports the prefix chunks from position 0, but they re-prefill
            # the tape from the reused tokens on.
            record.chunks = [
                ChunkPoint(c.turn, c.stage, c.start + event.reused, c.tokens, c.ms) if c.stage == "prefix" else c
                for c in record.chunks
            ]
            self._sample(event.t_ms, event.resident)
        elif isinstance(event, PrefillChunk):
            chunk = ChunkPoint(event.turn, event.stage, event.start, event.tokens, event.ms)
            running = self.turns.get(event.turn)
            # A prefix load (turn 0) or a restore's recompute (reported under the last,
            # finished turn) is no turn's cost, but its speed is still a measurement.
            (running.chunks if running and not running.finished else self.other_chunks).append(chunk)
            self._sample(event.t_ms, event.start + event.tokens)
        elif isinstance(event, TokenDecoded):
            record = self._record(event.turn)
            if self._last_token_ms is not None:
                record.tokens.append(TokenPoint(event.turn, self._decoded, event.t_ms - self._last_token_ms))
            self._last_token_ms = event.t_ms
            self._decoded += 1
            self._sample(event.t_ms, (self.resident[-1][1] if self.resident else 0) + 1)
        elif isinstance(event, TurnFinished):
            record = self._record(event.turn)
            record.result = event
            self._sample(event.t_ms, event.result.resident)
            self._read_tape()
            record.tape_after = self._last_tape
        elif isinstance(event, ResidencyChanged):
            self._sample(event.t_ms, int(event.report.get("resident_tokens", 0)))
        elif isinstance(event, NodeRestored):
            self._pending_restore = event
            self._sample(event.t_ms, event.tokens)
            self._read_tape()
        elif isinstance(event, PrefixCacheLookup):
            self._pending_lookup = event
            self._sample(event.t_ms, event.tokens)
            self._read_tape()
        elif isinstance(event, RequestRouted):
            self._pending_request = event
        elif isinstance(event, RequestServed):
            self.requests.add(event)

    def _record(self, turn: int) -> TurnRecord:
        if turn not in self.turns:  # events of a turn whose start was missed
            self.turns[turn] = TurnRecord(turn)
        return self.turns[turn]

    def _sample(self, t_ms: float, tokens: int) -> None:
        self.resident.append((t_ms, tokens))

    def _read_tape(self) -> None:
        if self._tape is not None:
            self.note_tape(self._tape())

    # ------------------------------------------------------------------ series

    def records(self) -> list[TurnRecord]:
        return [self.turns[t] for t in sorted(self.turns)]

    def chunks(self) -> list[ChunkPoint]:
        return sorted(self.other_chunks + [c for r in self.records() for c in r.chunks], key=lambda c: c.turn)

    def token_gaps(self) -> list[TokenPoint]:
        return [p for r in self.records() for p in r.tokens]

    def ttft(self) -> list[tuple[int, float]]:
        return [(r.turn, r.ttft_ms) for r in self.records() if r.ttft_ms is not None]

    # ------------------------------------------------------------------ explaining

    def explain(self, turn: int) -> Explanation | None:
        """Why turn `turn` reused what it reused; None before its prefix was checked."""
        record = self.turns.get(turn)
        if record is None or record.check is None:
            return None
        cause, detail = turn_cause(record)
        return Explanation(
            turn=turn, cause=cause, reused=record.reused, computed=record.computed,
            recomputed=record.check.prefilled, dropped=record.dropped, evicted=record.evicted,
            diverged_at=record.diverged_at, detail=detail, divergence=self._divergence(record),
        )

    def explanations(self) -> list[Explanation]:
        return [e for r in self.records() if (e := self.explain(r.turn)) is not None]

    def _divergence(self, record: TurnRecord) -> Divergence | None:
        at = record.diverged_at
        if at is None or self._detokenize is None or record.tape_before is None:
            return None
        after = record.tape_after or ()
        common = record.tape_before[max(0, at - CONTEXT_TOKENS) : at]
        return Divergence(
            before=self._detokenize(common),
            old=self._detokenize(record.tape_before[at : at + CONTEXT_TOKENS]),
            new=self._detokenize(after[at : at + CONTEXT_TOKENS]),
        )
