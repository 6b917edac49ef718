"""A stable prefix (a system prompt, a document) through the persistent prefix cache."""

from __future__ import annotations

import time

from effctx_core.engine.checkpoints import Checkpointer, StateWrite
from effctx_core.engine.prefill import prefill
from effctx_core.engine.records import PrefillCancelled, PrefixLoad
from effctx_core.engine.state import EngineState
from effctx_core.errors import EffctxError
from effctx_core.events.trace import PrefixCacheLookup
from effctx_core.residency import Segment
from effctx_core.residency.tracker import SegmentRun
from effctx_core.snapshots import SnapshotError, SnapshotStore, load_snapshot
from effctx_core.units import ms_since


class PrefixLoader:
    def __init__(self, state: EngineState, checkpointer: Checkpointer, cache: SnapshotStore | None):
        self._state = state
        self._checkpointer = checkpointer
        self.cache = cache

    def load(self, text: str, kind: Segment = Segment.DOCUMENT) -> PrefixLoad:
        """Make a stable prefix resident at the start of the session: restored from the
        prefix cache when this runtime identity has stored exactly these tokens, else
        prefilled and stored for the next session. Its prefill can be cancelled, which
        leaves the session empty."""
        state = self._state
        session, tracker = state.session, state.tracker
        if state.tape:
            raise EffctxError("a prefix can only be loaded at the start of a session")
        tokens = session.tokenize(text, add_bos=session.info.facts.add_bos)
        identity = session.info.identity
        store = self.cache
        t0 = time.perf_counter_ns()
        message = None
        if not session.info.capabilities.state_snapshot.supported:
            store = None  # states cannot be saved or loaded here: the prefix is prefilled
        costs = session.info.state_costs
        why = costs.recompute_reason if costs is not None else None
        recompute = store is not None and why is not None
        if recompute:
            # States cross a network on this cell: a restore would take longer than the
            # prefill it saves, so neither a restore nor a save is done.
            store = None
            message = f"prefix recomputed, not restored: {why}"
        # The longest stored prefix of these tokens (through the store's prefix index): all
        # of them is a hit; part of them (a prefix file edited near its end) is restored and
        # only the rest prefilled.
        match = store.longest_prefix(identity.digest(), tokens) if store is not None else None
        restored = 0
        if store is not None and match is not None:
            key, n = match
            try:
                session.restore(load_snapshot(store, key, identity))
            except SnapshotError as exc:
                # A damaged entry is quarantined by the store; a foreign one is left.
                message = f"prefix cache entry not used ({exc}); prefilling instead"
            else:
                state.left = []  # the restore replaced whatever a reset left in the session
                state.tape = list(tokens[:n])
                tracker.reset([SegmentRun(kind, n, 0)])
                if n == len(tokens):
                    return self._loaded("hit", tokens, n, t0, key, None)
                restored = n
        state.gate.clear()
        shared = restored or state.take_left(tokens)
        try:
            with state.gate.cancellable():
                if not restored:
                    # The session may still hold a conversation a reset or a cancel ended.
                    session.ensure_prefix(tokens[:shared])
                    state.tape = tokens[:shared]
                    tracker.append(kind, shared, 0)
                prefill(state, tokens[shared:], kind, 0, shared)
        except PrefillCancelled:
            # Nothing of the prefix counts: the next turn drops what was prefilled.
            state.tape = []
            tracker.reset()
            raise
        if store is None:
            return self._loaded("recompute" if recompute else "off", tokens, 0, t0, None, message)
        result = "partial" if restored else "miss"
        if tracker.report().resident_tokens < len(tokens):
            # The policy evicted part of it: the cache holds no state for the whole prefix.
            return self._loaded(result, tokens, restored, t0, None, message)
        # Written in the background: the first answer does not wait for the state's fsync.
        # A write that fails says so when the engine settles (a NodeUnsaved event, before
        # the next use of the store and at close).
        pending = self._checkpointer.write_prefix(store, meta={"kind": "prefix", "text_chars": len(text)})
        return self._loaded(result, tokens, restored, t0, pending, message)

    def _loaded(self, cache: str, tokens: list[int], restored: int, t0: int, stored: str | StateWrite | None,
                message: str | None) -> PrefixLoad:
        key = stored.key if isinstance(stored, StateWrite) else stored
        load = PrefixLoad(cache, len(tokens), ms_since(t0), key, message, restored)
        self._checkpointer.checkpoint("prefix", f"prefix ({cache})", None, {
            "prefilled": load.computed, "reused": restored, "load_ms": round(load.ms, 3),
        }, known_blob=stored)
        self._state.bus.emit(PrefixCacheLookup, result=cache, tokens=load.tokens, ms=round(load.ms, 3), key=key or "",
                             message=message or "", restored=restored)
        return load
