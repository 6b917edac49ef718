"""Everything the snapshot tree knows about one node: its tape, state, turn metrics and text."""

from __future__ import annotations

import time
from typing import Mapping

from textual.content import Content
from textual.widgets import Static

from effctx_core.engine import NodeRestore
from effctx_core.snapshots.tree import SnapshotTree
from effctx_core.units import format_count, format_counted, turn_speeds
from effctx_tui.themes import MUTED
from effctx_tui.widgets.snapshot_tree import restore_summary, state_size

COUNTS = ("reused", "prefilled", "generated")  # what every measured turn records


def turn_figures(m: Mapping[str, float]) -> list[str]:
    """A node's turn metrics (engine/turns.py writes them), only those that were measured."""
    counts = [f"{name} {format_count(m.get(name, 0))}" for name in COUNTS]
    speeds = turn_speeds(int(m.get("generated", 0)), m.get("ttft_ms"), m.get("prefill_tps", 0), m.get("decode_tps", 0))
    return counts + [f"{name} {figure}" for name, figure in speeds]


def node_details(tree: SnapshotTree, node_id: str, restore: NodeRestore | None,
                 missing: Mapping[str, str] = {}) -> Content:
    """`missing`: the store's answer for the tree's saved states (state_size)."""
    # Content, not Rich Text, can take a theme variable (MUTED)
    node = tree.node(node_id)
    tokens, shared = tree.tape_length(node_id), tree.shared_prefix(node_id)
    text = Content.styled(node.label or node.id, "bold")
    created = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(node.created))
    text = text.append_text(f"  {node.id} · {node.kind} · created {created}\n", MUTED)
    text = text.append_text(f"tape {format_counted(tokens, 'token')}")
    if node.parent is not None:
        text = text.append_text(f": {format_count(shared)} shared with {node.parent}, {format_count(tokens - shared)} own")
    if node.blob is None:
        text = text.append_text(" · no saved state (a restore recomputes it)")
    else:
        gone = missing.get(node.blob)
        text = text.append_text(f" · state {state_size(node)}" if gone is None
                                else f" · saved state {gone} (a restore recomputes it)")
        text = text.append_text(f" · blob {node.blob[:10]}", MUTED)
    # Metrics without a count measured no turn: a mark's, or a replayed request's (its
    # conversation only: a trace's node event carries no figures).
    if node.metrics and any(name in node.metrics for name in COUNTS):
        text = text.append_text("\n" + " · ".join(turn_figures(node.metrics)))
    if restore is not None:
        text = text.append_text(f"\nlast restore: {restore_summary(restore)} ")
        text = text.append_text(f"({restore.reason})", MUTED)
    if node.turn is not None:
        text = text.append_text("\n\n")
        text = text.append_text(node.turn.input.strip(), "bold")
        text = text.append_text("\n" + node.turn.reply.strip())
    return text


class SnapshotDetails(Static):
    def show(self, tree: SnapshotTree, node_id: str | None, restore: NodeRestore | None,
             missing: Mapping[str, str] = {}) -> None:
        if node_id is None or node_id not in tree:
            self.update(Content.styled("no node selected", MUTED))
        else:
            self.update(node_details(tree, node_id, restore, missing))
