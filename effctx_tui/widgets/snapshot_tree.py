"""The snapshot tree as a Textual Tree: one line per node, saying what it holds and costs.

The view keeps one Textual node per snapshot node and updates it in place, so the
cursor, the scroll position and what the user collapsed survive every live refresh.
"""

from __future__ import annotations

from typing import Mapping

from rich.style import Style
from rich.text import Text
from textual.binding import Binding
from textual.widgets.tree import TreeNode

from effctx_core.engine import NodeRestore
from effctx_core.snapshots.tree import Node, SnapshotTree
from effctx_tui.widgets.lists import ListTree

# Markers go before the label so that a long line scrolled off the right still shows them.
CURRENT_MARK = "● "
MARKED_MARK = "◆ "


def human_bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def _ms(ms: float) -> str:
    return f"{ms:.1f} ms" if ms < 10 else f"{ms:,.0f} ms"


def restore_summary(restore: NodeRestore) -> str:
    """'exact in 3.8 ms' or 'recompute 22 tokens in 150 ms'."""
    how = "exact" if restore.mode == "exact" else f"recompute {restore.recomputed:,} tokens"
    return f"{how} in {_ms(restore.ms)}"


def state_size(node: Node) -> str:
    if node.blob is None:
        return "no state"
    return human_bytes(int((node.metrics or {}).get("bytes", 0)))


def node_label(
    tree: SnapshotTree,
    node: Node,
    *,
    current: bool = False,
    marked: bool = False,
    restore: NodeRestore | None = None,
    restoring: bool = False,
    styles: Mapping[str, Style | str] = {},
) -> Text:
    """`styles` maps current, restoring, exact, recompute, marked and facts to a style
    (the view passes its theme's); without them the label is plain."""
    text = Text()
    if current:
        text.append(CURRENT_MARK, style=styles.get("current", ""))
    if marked:
        text.append(MARKED_MARK, style=styles.get("marked", ""))
    text.append(node.label or node.id, style="bold" if current else "")
    facts = [node.kind, f"{tree.tape_length(node.id):,} tokens", state_size(node)]
    if node.parent is not None:
        facts.append(f"{tree.shared_prefix(node.id):,} shared")
    text.append("  " + " · ".join(facts), style=styles.get("facts", ""))
    if restoring:
        text.append(" · restoring…", style=styles.get("restoring", ""))
    elif restore is not None:
        text.append(f" · {restore_summary(restore)}", style=styles.get(restore.mode, ""))
    return text


class SnapshotTreeView(ListTree):
    """Each Textual node's data is its snapshot node's id."""

    # Enter restores instead of toggling (space still toggles); a click only moves the
    # cursor, because a restore changes the session and should take a deliberate key.
    BINDINGS = [Binding("enter", "screen.restore", "Restore")]

    COMPONENT_CLASSES = {
        "snapshot-tree--current", "snapshot-tree--restoring", "snapshot-tree--exact",
        "snapshot-tree--recompute", "snapshot-tree--marked", "snapshot-tree--facts",
    }
    DEFAULT_CSS = """
    SnapshotTreeView {
        & > .snapshot-tree--current { color: $success; text-style: bold; }
        & > .snapshot-tree--restoring { color: $warning; text-style: italic; }
        & > .snapshot-tree--exact { color: $success; }
        & > .snapshot-tree--recompute { color: $warning; }
        & > .snapshot-tree--marked { color: $accent; text-style: bold; }
        /* secondary text (themes.MUTED), not "dim", which no theme can undo */
        & > .snapshot-tree--facts { color: $foreground-muted; }
    }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__("", **kwargs)
        self.auto_expand = False
        self.guide_depth = 3
        self._views: dict[str, TreeNode[str]] = {}

    @property
    def selected_id(self) -> str | None:
        node = self.cursor_node
        return None if node is None else node.data

    def select_id(self, node_id: str) -> None:
        view = self._views.get(node_id)
        if view is None:
            return
        _ = self.last_line  # building the lines gives each node its line for the cursor
        self.move_cursor(view)

    def show(
        self,
        tree: SnapshotTree,
        *,
        restores: Mapping[str, NodeRestore],
        marked: str | None = None,
        restoring: str | None = None,
    ) -> None:
        # One pass over a copy, parents first: the engine adds nodes from its worker
        # thread, and a copy never shows a node whose parent is missing.
        nodes = list(tree)
        alive = {n.id for n in nodes}
        with_children = {n.parent for n in nodes}
        for nid in [nid for nid in self._views if nid not in alive]:
            gone = self._views.pop(nid)
            parent = gone.parent
            if parent is not None and parent.data in alive:  # the rest go with their ancestor
                gone.remove()
        current = tree.current
        styles = {name: self.get_component_rich_style(f"snapshot-tree--{name}", partial=True)
                  for name in ("current", "restoring", "exact", "recompute", "marked")}
        # A partial style drops the colour's alpha, and $foreground-muted is the foreground
        # at 60% in a theme that does not set it: the full style blends it over the tree's
        # background. Its colour alone, so that the cursor line keeps its own background.
        styles["facts"] = Style(color=self.get_component_rich_style("snapshot-tree--facts").color)
        for node in nodes:
            label = node_label(
                tree, node, current=node.id == current, marked=node.id == marked,
                restore=restores.get(node.id), restoring=node.id == restoring, styles=styles,
            )
            view = self._views.get(node.id)
            if view is None:
                if node.parent is None:
                    view = self.root
                    view.data = node.id
                    view.expand()
                elif (parent_view := self._views.get(node.parent)) is not None:
                    view = parent_view.add(label, data=node.id, expand=True)
                else:
                    continue
                self._views[node.id] = view
            view.set_label(label)
            view.allow_expand = node.id in with_children
