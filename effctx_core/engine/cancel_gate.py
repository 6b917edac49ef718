"""Where a cancel is honoured: between two prefill chunks, when the work allows it."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Callable, Iterator

from effctx_core.cancel import CancelToken
from effctx_core.contract import PrefillProgress
from effctx_core.engine.events import EventBus
from effctx_core.engine.records import PrefillCancelled
from effctx_core.events.trace import PrefillChunk


class CancelGate:
    def __init__(self) -> None:
        self._event = threading.Event()
        self._open = False
        self._bound: CancelToken | None = None

    def cancel(self) -> None:
        self._event.set()

    def clear(self) -> None:
        """Forget a cancel that came before the work it would stop began."""
        self._event.clear()

    @property
    def requested(self) -> bool:
        bound = self._bound
        return self._event.is_set() or (bound is not None and bound.cancelled)

    @contextmanager
    def bound(self, token: CancelToken) -> Iterator[None]:
        """While inside, `token` stops the work too. It is the job's own signal, so
        `clear()` (a turn starting) leaves it set: a cancel that came before the job's
        turn began still stops that turn, and when the job ends its token no longer
        reaches the gate, so it can never stop the next job's work."""
        outer, self._bound = self._bound, token
        try:
            yield
        finally:
            self._bound = outer

    @contextmanager
    def cancellable(self) -> Iterator[None]:
        """Inside, a cancel stops a prefill between chunks. A turn's own prefill and a
        swap's (which can be undone) are; a restore that recomputes is not, or the
        conversation would be left half moved."""
        self._open = True
        try:
            yield
        finally:
            self._open = False

    def progress(self, bus: EventBus, turn: int, start: int) -> Callable[[PrefillProgress], None]:
        """The prefill progress callback: an event per chunk, and the cancel point."""

        def report(p: PrefillProgress) -> None:
            bus.emit(
                PrefillChunk, turn=turn, stage=p.stage, start=start + p.done - p.chunk_tokens,
                tokens=p.chunk_tokens, done=p.done, total=p.total, ms=round(p.ms, 3),
            )
            if self._open and self.requested and p.done < p.total:
                # Between two chunks the cache is consistent: what is done stays resident
                # (past the tape, so the next turn drops it) and the work ends here.
                raise PrefillCancelled(p.done, p.total)

        return report
