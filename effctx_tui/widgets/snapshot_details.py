"""Everything the snapshot tree knows about one node: its tape, state, turn metrics and text."""

from __future__ import annotations

import time

from rich.text import Text
from textual.widgets import Static

from effctx_core.engine import NodeRestore
from effctx_core.snapshots.tree import SnapshotTree

from .snapshot_tree import restore_summary, state_size


def node_details(tree: SnapshotTree, node_id: str, restore: NodeRestore | None) -> Text:
    node = tree.node(node_id)
    tokens, shared = tree.tape_length(node_id), tree.shared_prefix(node_id)
    text = Text()
    text.append(node.label or node.id, style="bold")
    created = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(node.created))
    text.append(f"  {node.id} · {node.kind} · created {created}\n", style="dim")
    text.append(f"tape {tokens:,} tokens")
    if node.parent is not None:
        text.append(f": {shared:,} shared with {node.parent}, {tokens - shared:,} own")
    if node.blob is None:
        text.append(" · no saved state (a restore recomputes it)")
    else:
        text.append(f" · state {state_size(node)}")
        text.append(f" · blob {node.blob[:10]}", style="dim")
    m = node.metrics or {}
    if m:
        text.append(f"\nreused {m.get('reused', 0):,} · prefilled {m.get('prefilled', 0):,}"
                    f" · generated {m.get('generated', 0):,} · TTFT {m.get('ttft_ms', 0):.0f} ms"
                    f" · prefill {m.get('prefill_tps', 0):.0f} tok/s · decode {m.get('decode_tps', 0):.1f} tok/s")
    if restore is not None:
        text.append(f"\nlast restore: {restore_summary(restore)} ")
        text.append(f"({restore.reason})", style="dim")
    if node.text:
        user, _, reply = node.text.partition("\n")
        text.append("\n\n")
        text.append(user, style="bold")
        text.append("\n" + reply.strip())
    return text


class SnapshotDetails(Static):
    def show(self, tree: SnapshotTree, node_id: str | None, restore: NodeRestore | None) -> None:
        if node_id is None or node_id not in tree:
            self.update(Text("no node selected", style="dim"))
        else:
            self.update(node_details(tree, node_id, restore))
