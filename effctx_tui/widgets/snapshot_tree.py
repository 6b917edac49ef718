"""The snapshot tree as a Textual Tree: one line per node, saying what it holds and costs.

The view keeps one Textual node per snapshot node and updates it in place, so the
cursor, the scroll position and what the user collapsed survive every live refresh.
"""

from __future__ import annotations

from typing import Callable, Mapping

from rich.style import Style
from rich.text import Text
from textual.binding import Binding
from textual.widgets.tree import TreeNode

from effctx_core.engine import NodeRestore
from effctx_core.snapshots.tree import Node, SnapshotTree
from effctx_core.units import format_bytes, format_count, format_counted, format_ms
from effctx_tui.widgets.lists import ListTree

# Markers go before the label so that a long line scrolled off the right still shows them.
CURRENT_MARK = "● "
MARKED_MARK = "◆ "
# A label is never shortened below this: on a line too narrow for label and facts both,
# the line runs past the edge (the tree scrolls sideways) rather than losing its name.
MIN_LABEL = 12


def restore_summary(restore: NodeRestore) -> str:
    """'exact in 3.8 ms', 'recompute 22 tokens in 150 ms', or 'cut back to its 35 tokens in
    12 ms' when the node's tape was all resident already (a node up the current branch) and
    nothing had to be computed."""
    if restore.mode == "exact":
        how = "exact"
    elif restore.recomputed:
        how = f"recompute {format_counted(restore.recomputed, 'token')}"
    else:
        how = f"cut back to its {format_counted(restore.tokens, 'token')}"
    return f"{how} in {format_ms(restore.ms)}"


def state_size(node: Node, missing: Mapping[str, str] = {}) -> str:
    """The node's saved state as the store holds it: its size, or why there is none.
    `missing` is the store's answer (SnapshotStore.missing_states) for the tree's blobs."""
    if node.blob is None:
        return "no state"
    if node.blob in missing:
        return f"state {missing[node.blob]}"
    return format_bytes(int((node.metrics or {}).get("bytes", 0)))


def shortened(label: str, room: int) -> str:
    """`label` in at most `room` cells, its end given up for an ellipsis."""
    text = Text(label)
    text.truncate(room, overflow="ellipsis")
    return text.plain


def node_label(
    tree: SnapshotTree,
    node: Node,
    *,
    current: bool = False,
    marked: bool = False,
    restore: NodeRestore | None = None,
    restoring: bool = False,
    missing: Mapping[str, str] = {},
    styles: Mapping[str, Style | str] = {},
    width: int | None = None,
) -> Text:
    """`styles` maps current, restoring, exact, recompute, marked and facts to a style
    (the view passes its theme's); without them the label is plain. Given `width` (the
    cells the line has), a long label is shortened so that the facts stay in view."""
    marks = Text()
    if current:
        marks.append(CURRENT_MARK, style=styles.get("current", ""))
    if marked:
        marks.append(MARKED_MARK, style=styles.get("marked", ""))
    facts = [node.kind, format_counted(tree.tape_length(node.id), "token"), state_size(node, missing)]
    if node.parent is not None:
        facts.append(f"{format_count(tree.shared_prefix(node.id))} shared")
    tail = Text("  " + " · ".join(facts), style=styles.get("facts", ""))
    if restoring:
        tail.append(" · restoring…", style=styles.get("restoring", ""))
    elif restore is not None:
        tail.append(f" · {restore_summary(restore)}", style=styles.get(restore.mode, ""))
    label = node.label or node.id
    if width is not None:
        label = shortened(label, max(MIN_LABEL, width - marks.cell_len - tail.cell_len))
    return Text.assemble(marks, Text(label, style="bold" if current else ""), tail)


class SnapshotTreeView(ListTree):
    """Each Textual node's data is its snapshot node's id."""

    # Enter restores instead of toggling (space still toggles); a click only moves the
    # cursor, because a restore changes the session and should take a deliberate key.
    BINDINGS = [Binding("enter", "screen.restore", "Restore", tooltip="Back to the selected node: from its stored state, or recomputed")]

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
        self._reshow: Callable[[], None] = lambda: None  # the last show, again at a new width

    def on_resize(self) -> None:
        self._reshow()

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
        missing: Mapping[str, str] = {},
        only: set[str] | None = None,
    ) -> None:
        """`missing`: the store's answer for the tree's saved states (state_size); `only`:
        the nodes to draw (one conversation's and those above them), None for all."""
        self._reshow = lambda: self.show(tree, restores=restores, marked=marked, restoring=restoring, missing=missing,
                                         only=only)
        # One pass over a copy, parents first: the engine adds nodes from its worker
        # thread, and a copy never shows a node whose parent is missing.
        nodes = [n for n in tree if only is None or n.id in only]
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
        # Before the first layout the tree has no width: labels are whole until the resize.
        room = self.scrollable_content_region.width or None
        for node in nodes:
            width = None if room is None else (
                room - tree.depth(node.id) * self.guide_depth - (len(self.ICON_NODE) if node.id in with_children else 0))
            label = node_label(
                tree, node, current=node.id == current, marked=node.id == marked, restore=restores.get(node.id),
                restoring=node.id == restoring, missing=missing, styles=styles, width=width,
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
