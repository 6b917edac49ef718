"""A stable prefix through the persistent prefix cache: part of SessionEngine.

A mixin: loading a prefix fills the engine's empty session and tape.
"""

from __future__ import annotations

import time

from effctx_core.errors import EffctxError
from effctx_core.engine.records import PrefillCancelled, PrefixLoad
from effctx_core.residency import Segment
from effctx_core.events.trace import PrefixCacheLookup


class PrefixLoading:
    def load_prefix(self, text: str, kind: Segment = Segment.DOCUMENT) -> PrefixLoad:
        """Make a stable prefix (a system prompt, a document) resident at the start of the
        session: restored from the prefix cache when this runtime identity has stored
        exactly these tokens, else prefilled and stored for the next session. Its prefill
        can be cancelled (`cancel`), which leaves the session empty."""
        from effctx_core.snapshots import SnapshotError, load_snapshot, save_snapshot

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
