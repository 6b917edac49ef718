"""The snapshot tree of a running session: checkpoints, saved sessions and restores.

Every checkpoint is a node for the tape as it is, with the session's state when there is
a store for it; a restore goes back to a node exactly, or recomputes its tokens.
"""

from __future__ import annotations

import time
from pathlib import Path

from effctx_core.engine.prefill import prefill_runs
from effctx_core.engine.records import NodeRestore
from effctx_core.engine.state import EngineState
from effctx_core.errors import EffctxError
from effctx_core.events.trace import NodeAdded, NodeRestored
from effctx_core.residency.tracker import segments_from_json, segments_to_json
from effctx_core.snapshots import SnapshotError, SnapshotNotFoundError, SnapshotStore, load_snapshot, save_snapshot
from effctx_core.snapshots.tree import TurnText
from effctx_core.snapshots.tree_file import load_tree, save_tree
from effctx_core.units import ms_since


def session_owner(name: str) -> str:
    """The snapshot-store owner name under which a saved session keeps its states."""
    return f"session-{name}"


# Snapshot kinds that belong to a session's tree; a "prefix" entry belongs to the cache.
CHECKPOINT_KINDS = ("turn", "manual")


def _remove_checkpoint(store: SnapshotStore, key: str) -> None:
    try:
        info = store.info(key)
        if not info.refs and info.meta.get("kind") in CHECKPOINT_KINDS:
            store.rm(key)
    except SnapshotError:
        pass  # gone already, or taken by another session meanwhile: nothing to give back


class Checkpointer:
    def __init__(self, state: EngineState, store: SnapshotStore | None):
        self._state = state
        # Where the state of every turn's node goes; None keeps the tree without states
        # (a restore then recomputes).
        self.store = store
        self._made_blobs: set[str] = set()  # states this engine saved, until a save lets go of them

    def checkpoint(self, kind: str, label: str, turn: TurnText | None, metrics: dict,
                   known_blob: str | None = None) -> None:
        """A node for the tape as it is now, with the session's state when there is a store.

        Under an evicting policy the cache holds only part of the tape, so no state is
        saved: a restore of such a node recomputes its tokens."""
        state = self._state
        session, tracker, tree, tape = state.session, state.tracker, state.tree, state.tape
        # The deepest node whose tape this one extends: the node the turn started from,
        # or, after a restore, the node restored.
        parent = tree.find_by_tape(tape) or tree.root
        if parent is None:
            raise EffctxError("the snapshot tree has no root: the engine was not opened")
        if tree.tape_length(parent.id) == len(tape):
            tree.set_current(parent.id)  # the turn arrived at a node that exists
            return
        blob, state_bytes, message = known_blob, 0, None
        costs = session.info.state_costs
        # A turn's state is not saved where restoring it would cost more than recomputing
        # it (states cross a network); a checkpoint the user asks for always is.
        dearer = costs.recompute_reason if costs is not None and kind == "turn" else None
        if dearer is not None and blob is None and self.store is not None:
            message = f"state not saved: {dearer}; restoring this node will recompute it"
        elif blob is None and self.store is not None and not tracker.evicts \
                and session.info.capabilities.state_snapshot.supported:
            try:
                snap = session.snapshot()
                blob = save_snapshot(self.store, snap, meta={"kind": kind}).key
                self._made_blobs.add(blob)
                state_bytes = len(snap.state)
            except SnapshotError as exc:
                message = f"state not saved ({exc}); restoring this node will recompute it"
        node = tree.add_tape(
            parent.id, tape, kind, session.info.identity.digest(), label=label,
            residency={**tracker.report().to_dict(), "segments": segments_to_json(tracker.segments_from())}, metrics={**metrics, "bytes": state_bytes}, blob=blob, turn=turn,
        )
        state.bus.emit(NodeAdded, node=node.id, parent=node.parent or "", tokens=len(tape), blob=blob or "",
                       message=message or "", conversation=metrics.get("conversation", ""), label=label)

    def save_session(self, name: str) -> Path:
        """Save the tree as a named session; the store keeps every state it references.

        The states of nodes deleted since the last save (or made in this run and deleted
        before any save) are removed from the store, unless another session references
        them or they are prefix-cache entries (which outlive sessions): a deleted branch
        gives its disk space back at once, not at the LRU's turn."""
        tree = self._state.tree
        path = save_tree(tree, name)
        store = self.store
        if store is not None:
            owner = session_owner(name)
            before = set(store.refs_of(owner))
            store.remove_refs(owner)
            kept = tree.blobs()
            for key in sorted(kept):
                try:
                    store.add_ref(key, owner)
                except SnapshotNotFoundError:
                    pass  # evicted before the tree was saved: that node will recompute
            for key in sorted((before | self._made_blobs) - kept):
                _remove_checkpoint(store, key)
                self._made_blobs.discard(key)
        return path

    def load_session(self, name: str) -> NodeRestore | None:
        """Open a saved session's tree and go to its current node."""
        state = self._state
        tree = load_tree(name)
        state.tree = tree
        state.tape = []
        state.tracker.reset()
        return self.restore_node(tree.current) if tree.current is not None else None

    def restore_node(self, node_id: str) -> NodeRestore:
        """Go back to a node: its exact state when it has one this runtime can load,
        otherwise its tokens recomputed. The next turn then branches from it."""
        state = self._state
        session, tracker, tree = state.session, state.tracker, state.tree
        node = tree.node(node_id)
        tape = list(tree.tape(node_id))
        t0 = time.perf_counter_ns()
        mode, reason = "recompute", "the node has no saved state"
        if node.blob is not None and self.store is not None:
            try:
                session.restore(load_snapshot(self.store, node.blob, session.info.identity))
                mode, reason = "exact", "restored its saved state"
            except SnapshotError as exc:
                reason = f"its saved state is unusable ({exc})"
        elif node.identity_digest != session.info.identity.digest():
            reason = "it was made by another runtime identity"
        if mode == "exact" and list(session.tokens) != tape:
            # the state held a stop text the tape had dropped: cut it off
            session.ensure_prefix(tape)
        recomputed = 0
        runs = segments_from_json((node.residency or {}).get("segments"), len(tape))
        if mode == "recompute" and tracker.evicts:
            # Streamed through the policy again: the map is the one this recompute made.
            session.ensure_prefix([])
            state.tape = []
            tracker.reset()
            prefill_runs(state, tape, runs, 0)
            recomputed = len(tape)
        else:
            if mode == "recompute":
                recomputed = session.ensure_prefix(tape, state.progress(state.turns, 0)).prefilled
            state.tape = tape
            tracker.reset(runs)
        tree.set_current(node_id)
        restore = NodeRestore(node_id, mode, len(tape), recomputed, ms_since(t0), reason)
        state.bus.emit(NodeRestored, node=node_id, mode=mode, tokens=len(tape), recomputed=recomputed,
                       ms=round(restore.ms, 3), reason=reason)
        return restore
