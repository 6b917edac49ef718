"""The endpoint's conversations in a snapshot tree: each request's node records its
conversation (node metrics), so a conversation is the set of its requests' nodes.

A conversation's name is its first node's label after the "c2 · " the endpoint puts
before it: renaming that node renames the conversation, and the name is saved with the
tree as the label is."""

from __future__ import annotations

from dataclasses import dataclass

from effctx_core.snapshots.tree import SnapshotTree


@dataclass(frozen=True)
class Conversation:
    id: str  # the endpoint's name for it: c1, c2…
    name: str  # its first node's label after the conversation (conversation_name)
    nodes: tuple[str, ...]  # its requests' nodes, oldest first


def conversation_label(cid: str, text: str) -> str:
    """The label of a node of conversation `cid`: the conversation first, so that each
    reads as a branch of the tree, then `text` (on its first node, the conversation's name)."""
    return f"{cid} · {text}"


def conversation_name(cid: str, label: str) -> str:
    """What a label of conversation `cid`'s first node names it: the label after the
    conversation, or all of it when a rename left the conversation out."""
    start = conversation_label(cid, "")
    return label[len(start):] if label.startswith(start) else label


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
            names[cid] = conversation_name(cid, node.label)
        found[cid].append(node.id)
    return [Conversation(cid, names[cid], tuple(ids)) for cid, ids in found.items()]


def with_ancestors(tree: SnapshotTree, ids: tuple[str, ...]) -> set[str]:
    """The nodes and every node above them: what a view of those nodes must draw."""
    shown: set[str] = set()
    for node_id in ids:
        shown.update(n.id for n in tree.path(node_id))
    return shown
