"""The endpoint's conversations in a snapshot tree: each request's node records its
conversation (node metrics), so a conversation is the set of its requests' nodes."""

from __future__ import annotations

from dataclasses import dataclass

from effctx_core.snapshots.tree import SnapshotTree


@dataclass(frozen=True)
class Conversation:
    id: str  # the endpoint's name for it: c1, c2…
    name: str  # what its first request said
    nodes: tuple[str, ...]  # its requests' nodes, oldest first


def conversations(tree: SnapshotTree) -> list[Conversation]:
    """The tree's conversations, in the order they began."""
    found: dict[str, list[str]] = {}
    names: dict[str, str] = {}
    for node in sorted(tree, key=lambda n: n.created):
        cid = (node.metrics or {}).get("conversation")
        if not cid:
            continue
        if cid not in found:
            found[cid] = []
            names[cid] = node.turn.label if node.turn is not None else node.label
        found[cid].append(node.id)
    return [Conversation(cid, names[cid], tuple(ids)) for cid, ids in found.items()]


def with_ancestors(tree: SnapshotTree, ids: tuple[str, ...]) -> set[str]:
    """The nodes and every node above them: what a view of those nodes must draw."""
    shown: set[str] = set()
    for node_id in ids:
        shown.update(n.id for n in tree.path(node_id))
    return shown
