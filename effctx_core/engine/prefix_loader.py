"""A stable prefix (a system prompt, a document) through the persistent prefix cache."""

from __future__ import annotations

import time

from effctx_core.engine.checkpoints import Checkpointer
from effctx_core.engine.prefill import prefill
from effctx_core.engine.records import PrefillCancelled, PrefixLoad
from effctx_core.engine.state import EngineState
from effctx_core.errors import EffctxError
from effctx_core.events.trace import PrefixCacheLookup
from effctx_core.residency import Segment
from effctx_core.snapshots import SnapshotError, SnapshotStore, load_snapshot, save_snapshot
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
        key = store.find(identity.digest(), tokens) if store is not None else None
        if store is not None and key is not None:
            try:
                session.restore(load_snapshot(store, key, identity))
            except SnapshotError as exc:
                # A damaged entry is quarantined by the store; a foreign one is left.
                message = f"prefix cache entry not used ({exc}); prefilling instead"
                key = None
            else:
                state.tape = list(tokens)
                tracker.reset(kind, len(tokens))
                return self._loaded("hit", tokens, t0, key, None)
        state.gate.clear()
        shared = state.take_left(tokens)
        try:
            with state.gate.cancellable():
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
            return self._loaded("recompute" if recompute else "off", tokens, t0, None, message)
        if tracker.report().resident_tokens < len(tokens):
            # The policy evicted part of it: the cache holds no state for the whole prefix.
            return self._loaded("miss", tokens, t0, None, message)
        try:
            key = save_snapshot(store, session.snapshot(), meta={"kind": "prefix", "text_chars": len(text)}).key
        except SnapshotError as exc:
            message = f"prefix cache not written ({exc}); running without it"
        return self._loaded("miss", tokens, t0, key, message)

    def _loaded(self, cache: str, tokens: list[int], t0: int, key: str | None, message: str | None) -> PrefixLoad:
        load = PrefixLoad(cache, len(tokens), ms_since(t0), key, message)
        hit = cache == "hit"
        self._checkpointer.checkpoint("prefix", f"prefix ({cache})", None, {
            "prefilled": 0 if hit else len(tokens), "reused": len(tokens) if hit else 0, "load_ms": round(load.ms, 3),
        }, known_blob=key)
        self._state.bus.emit(PrefixCacheLookup, result=cache, tokens=load.tokens, ms=round(load.ms, 3), key=key or "",
                             message=message or "")
        return load
