"""The snapshot tree of a running session: checkpoints, saved sessions and restores.

Every checkpoint is a node for the tape as it is, with the session's state when there is
a store for it; a restore goes back to a node exactly, or recomputes its tokens.

A node's state is written in the background (state_writer.py): the node names its key at
once, and whatever uses the store's states (a restore, a save, a swap, a close, a request
that leaves the tape) settles first (`settle`): the writes end, and a node whose write
failed is left without a state, which a NodeUnsaved event says. A crash loses at most the
states not yet written; their nodes then recompute, as for a state the store evicted.
"""

from __future__ import annotations

import time
from concurrent.futures import Future
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterable

from effctx_core.engine.prefill import prefill_runs
from effctx_core.engine.records import NodeRestore
from effctx_core.engine.state import EngineState
from effctx_core.engine.state_writer import StateWriter
from effctx_core.errors import EffctxError
from effctx_core.events.trace import NodeAdded, NodeRestored, NodeUnsaved
from effctx_core.residency.tracker import segments_from_json, segments_to_json
from effctx_core.snapshots import (
    EntryInfo,
    SnapshotError,
    SnapshotNotFoundError,
    SnapshotStore,
    load_snapshot,
    snapshot_key,
)
from effctx_core.snapshots.tree import SnapshotTree, TurnText
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


def _not_saved(reason: object) -> str:
    return f"state not saved ({reason}); restoring this node will recompute it"


def _prefix_not_cached(reason: object) -> str:
    return f"prefix cache not written ({reason}); running without it"


@dataclass(frozen=True)
class StateWrite:
    """A node's state on its way to a store: the checkpoints', or the prefix cache's
    (write_prefix, whose node is known only when checkpoint makes it)."""

    tree: SnapshotTree  # the tree the node was added to (a loaded session replaces the engine's)
    node: str  # "" until the node is made
    key: str  # known at once, before the write ends
    future: Future[EntryInfo]
    unsaved: Callable[[object], str] = _not_saved  # what a failed write says


class Checkpointer:
    def __init__(self, state: EngineState, store: SnapshotStore | None):
        self._state = state
        # Where the state of every turn's node goes; None keeps the tree without states
        # (a restore then recomputes).
        self.store = store
        self._made_blobs: set[str] = set()  # states this engine saved, until a save lets go of them
        self._writer = StateWriter()
        self._writes: list[StateWrite] = []  # not yet seen to end; the engine's thread's alone

    def settle(self) -> None:
        """Wait until every state written in the background is on disk or has failed; a
        failed one leaves its node without a state, and a NodeUnsaved event says so. On
        the engine's thread, under its lock: it changes the tree."""
        self._writer.wait()
        self._collect()

    def close(self) -> None:
        self.settle()
        self._writer.close()

    def missing_states(self, keys: Iterable[str]) -> dict[str, str]:
        """Of these saved states, the ones the checkpoint store does not hold, each with
        why. From any thread: it waits for the writes (a state on its way is neither held
        nor missing yet) but leaves the tree to the engine's thread."""
        if self.store is None:
            return {key: "checkpoints off" for key in keys}
        self._writer.wait()
        return self.store.missing_states(keys)

    def _collect(self) -> None:
        """Forget the writes that ended; a failed one takes its state off its node."""
        writes, self._writes = self._writes, []
        for write in writes:
            if not write.future.done():
                self._writes.append(write)
                continue
            error = write.future.exception()
            if error is None:
                continue
            # Whatever stopped the write (a full disk, a state over the store's budget),
            # the node must not name a state the store does not hold.
            self._made_blobs.discard(write.key)
            if write.node in write.tree and write.tree.node(write.node).blob == write.key:
                write.tree.set_blob(write.node, None)
            self._state.bus.emit(NodeUnsaved, node=write.node, blob=write.key, message=write.unsaved(error))

    def write_prefix(self, store: SnapshotStore, meta: dict) -> StateWrite:
        """The session's state, as it is now, written to the prefix cache in the background
        (the cold turn's answer does not wait for its fsync). Its node is made with
        `checkpoint(..., known_blob=pending)`; a failed write takes the state off the node
        and says the prefix cache was not written."""
        snap = self._state.session.snapshot()
        return StateWrite(self._state.tree, "", snapshot_key(snap), self._writer.write(store, snap, meta),
                          _prefix_not_cached)

    def checkpoint(self, kind: str, label: str, turn: TurnText | None, metrics: dict,
                   known_blob: str | StateWrite | None = None) -> None:
        """A node for the tape as it is now, with the session's state when there is a store.

        `known_blob` is a state stored already, or on its way (write_prefix). Under an
        evicting policy the cache holds only part of the tape, so no state is saved: a
        restore of such a node recomputes its tokens."""
        self._collect()  # an earlier write that failed is said before this node
        state = self._state
        session, tracker, tree, tape = state.session, state.tracker, state.tree, state.tape
        # The deepest node whose tape this one extends: the node the turn started from,
        # or, after a restore, the node restored.
        parent = tree.find_by_tape(tape) or tree.root
        if parent is None:
            raise EffctxError("the snapshot tree has no root: the engine was not opened")
        pending: StateWrite | None = None
        if isinstance(known_blob, StateWrite):
            pending = replace(known_blob, tree=tree, node=parent.id)
            known_blob = known_blob.key
        if tree.tape_length(parent.id) == len(tape):
            tree.set_current(parent.id)  # the turn arrived at a node that exists
            if pending is not None:
                self._writes.append(pending)  # a failed write is still said
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
            # The state as the turn left it, now (the reply's last token pending, as it
            # is in the session); its write goes on in the background.
            snap = session.snapshot()
            blob, state_bytes = snapshot_key(snap), len(snap.state)
            pending = StateWrite(tree, "", blob, self._writer.write(self.store, snap, {"kind": kind}))
            self._made_blobs.add(blob)
        node = tree.add_tape(
            parent.id, tape, kind, session.info.identity.digest(), label=label,
            residency={**tracker.report().to_dict(), "segments": segments_to_json(tracker.segments_from())}, metrics={**metrics, "bytes": state_bytes}, blob=blob, turn=turn,
        )
        if pending is not None:
            self._writes.append(replace(pending, node=node.id))
        state.bus.emit(NodeAdded, node=node.id, parent=node.parent or "", tokens=len(tape), blob=blob or "",
                       message=message or "", conversation=metrics.get("conversation", ""), label=label)

    def save_session(self, name: str) -> Path:
        """Save the tree as a named session; the store keeps every state it references.

        The states of nodes deleted since the last save (or made in this run and deleted
        before any save) are removed from the store, unless another session references
        them or they are prefix-cache entries (which outlive sessions): a deleted branch
        gives its disk space back at once, not at the LRU's turn."""
        self.settle()  # the file names only states on disk, and no node whose write failed
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
        self.settle()  # its state may still be on its way to the store
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
