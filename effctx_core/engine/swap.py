"""Moving the running conversation to another cell: part of SessionEngine.

A mixin, not an object of its own: a swap replaces the engine's session, tracker and
executor in place, under the engine's lock, so it works on the engine's own state.
"""

from __future__ import annotations

import time

from effctx_core.backends.registry import get_backend
from effctx_core.errors import EffctxError
from effctx_core.engine.records import PrefillCancelled, SwapCancelled, SwapResult
from effctx_core.profiles import Profile
from effctx_core.residency import Segment
from effctx_core.events.trace import CellSwapped, SwapAbandoned


class CellSwapping:
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
