"""The token tape of a single-sequence session, whatever runs the model: the tokens resident
in the cache, then the pending ones (sampled, not evaluated yet), the counters `explain`
reports, and the longest-common-prefix rule that decides what of the cache a new prefix
keeps. A session holds one and edits it as its cache changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from effctx_core.contract import ContextReport, DecodeConfig, PrefixCause, RuntimeCounts
from effctx_core.errors import ContextOverflowError


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.flatnonzero(np.asarray(a[:n], dtype=np.int64) != np.asarray(b[:n], dtype=np.int64))
    return int(diff[0]) if len(diff) else n


@dataclass
class TapeCounters:
    """The work the cache did on the tape's behalf, as `explain` reports it."""

    prefill_calls: int = 0
    prefill_tokens: int = 0
    prefill_ms: float = 0.0
    decode_calls: int = 0
    decode_tokens: int = 0
    decode_ms: float = 0.0

    def count_prefill(self, n: int, ms: float) -> None:
        if n:
            self.prefill_calls += 1
            self.prefill_tokens += n
            self.prefill_ms += ms

    def count_decode_step(self, ms: float = 0.0) -> None:
        """One decoded token evaluated into the cache."""
        self.decode_calls += 1
        self.decode_tokens += 1
        self.decode_ms += ms

    def count_decode_time(self, ms: float) -> None:
        """Time spent on a decoded token whose step is counted when the runtime evaluates
        it, with a later request."""
        self.decode_ms += ms

    def count_carried(self, n: int) -> None:
        """Pending tokens (decoded, the last of a reply) evaluated in a prefill's batch:
        each is the decode step of the reply it ended, not a prefilled token."""
        self.decode_tokens += n

    def correct_reuse(self, shift: int) -> None:
        """The runtime reused `shift` tokens more than the tape's rule said it would: they
        were counted as prefilled and were not."""
        self.prefill_tokens -= shift


@dataclass(frozen=True)
class PrefixCut:
    """What of the cache a new prefix keeps, and why; `diverged_at` is set where the cache
    must be cut back to `keep`."""

    keep: int
    dropped: int
    cause: PrefixCause
    diverged_at: int | None = None
    rollback_floor: int | None = None
    held: int = 0  # pending tokens the prefix goes on through: kept, not prefilled


def _prefix_cause(before: int, keep: int, wanted: int) -> PrefixCause:
    if before == 0:
        return PrefixCause.EMPTY
    if keep == before == wanted:
        return PrefixCause.IDENTICAL
    if keep == before:
        return PrefixCause.EXTENDS
    return PrefixCause.DIVERGED


class Tape:
    """Resident tokens, then pending ones, within n_ctx; the counters of the work on them."""

    def __init__(self, n_ctx: int):
        self.n_ctx = n_ctx
        self.resident: list[int] = []
        self.pending: list[int] = []
        self.counters = TapeCounters()

    @property
    def tokens(self) -> tuple[int, ...]:
        return tuple(self.resident) + tuple(self.pending)

    @property
    def available(self) -> int:
        return self.n_ctx - len(self.resident)

    def reset(self, resident: Sequence[int] = (), pending: Sequence[int] = ()) -> None:
        self.resident, self.pending = list(resident), list(pending)

    def check_room(self, stage: str, n: int) -> None:
        if len(self.resident) + n > self.n_ctx:
            raise ContextOverflowError(stage, len(self.resident), n, self.n_ctx)

    def cut_for(self, prefix: Sequence[int], rollback_limit: Callable[[], int]) -> PrefixCut:
        """Keep the longest common prefix of the resident tokens and `prefix` (and the
        pending tokens, where `prefix` ends on exactly them); all of it goes where the
        cache cannot be cut back that far exactly. `rollback_limit` is asked
        only when the prefix diverges: it may cost a call into the runtime."""
        if len(prefix) > self.n_ctx:
            raise ContextOverflowError("prefix", 0, len(prefix), self.n_ctx)
        before = len(self.resident)
        keep = common_prefix_length(self.resident, prefix)
        held = len(self.pending)
        if keep == before and held and list(prefix[before:before + held]) == self.pending:
            # The prefix goes on through the pending tokens (a reply's last one): they
            # are kept and evaluated in the same batch as whatever follows them.
            return PrefixCut(keep, 0, _prefix_cause(before + held, keep + held, len(prefix)), held=held)
        cause = _prefix_cause(before, keep, len(prefix))
        if keep == before:
            return PrefixCut(keep, 0, cause)
        limit = rollback_limit()
        if keep < limit:
            return PrefixCut(0, before, PrefixCause.ROLLBACK_LIMIT, diverged_at=keep, rollback_floor=limit)
        return PrefixCut(keep, before - keep, cause, diverged_at=keep)

    def settle_pending(self) -> None:
        """The runtime evaluated the pending token (to sample the next one, or at a stop
        with room left): it is resident now, one decode step."""
        self.resident += self.pending
        self.pending = []
        self.counters.count_decode_step()

    def stop_reason(self, index: int, config: DecodeConfig) -> str | None:
        """Why the token at `index` ends the reply, if it does. The context filling is the
        truer reason when both hold: the engine shortens max_tokens to the room left, so
        it ends there too."""
        if self.available <= 1 and not config.slide:
            return "n_ctx"
        if index == config.max_tokens - 1:
            return "max_tokens"
        return None

    def report(self, poisoned: bool, rollback_floor: int, runtime_counts: RuntimeCounts | None,
               restart_points: tuple[int, ...] = ()) -> ContextReport:
        c = self.counters
        return ContextReport(
            resident_tokens=len(self.resident),
            pending_tokens=len(self.pending),
            available_tokens=self.available,
            n_ctx=self.n_ctx,
            prefill_calls=c.prefill_calls,
            prefill_tokens=c.prefill_tokens,
            prefill_ms=c.prefill_ms,
            decode_calls=c.decode_calls,
            decode_tokens=c.decode_tokens,
            decode_ms=c.decode_ms,
            poisoned=poisoned,
            rollback_floor=rollback_floor,
            runtime_counts=runtime_counts,
            restart_points=restart_points,
        )
