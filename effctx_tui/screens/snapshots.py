"""The snapshots screen: the session's tree of snapshots, to restore, branch, rename,
delete and compare.

The screen knows a tree and three callables, not an engine: `restore(node_id)`,
`detokenize(tokens)` and `missing_states(keys)` (which saved states the store does not
hold), all run on thread workers because they are backend or disk calls, and the
engine's events, which say when the tree grew and how far a restore is. The session
screen passes the engine's; a test passes a hand-made tree and no restore.
Tree changes made here (rename, delete) are plain data on the app thread; they and
everything that reads tapes wait while the engine works (`is_busy`), because the
engine writes the tree from its worker thread.
"""

from __future__ import annotations

from typing import Callable, Iterable, MutableMapping, cast

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Header, Static, Tree

from effctx_core.engine import EventSource, NodeRestore
from effctx_core.events.subscribers import Unsubscribe
from effctx_core.events.trace import NodeAdded, NodeRestored, NodeUnsaved, PrefillChunk
from effctx_core.snapshots.conversations import Conversation, conversation_label, conversations, with_ancestors
from effctx_core.snapshots.tree import SnapshotTree
from effctx_core.units import format_counted
from effctx_tui.messages import EngineEvent, post_events
from effctx_tui.screens.snapshot_dialogs import ConfirmDialog, RenameDialog
from effctx_tui.screens.snapshot_diff import Detokenize, DiffReport, DiffScreen, describe_diff
from effctx_tui.widgets.footer import EffctxFooter
from effctx_tui.widgets.snapshot_details import SnapshotDetails
from effctx_tui.widgets.snapshot_tree import SnapshotTreeView, restore_summary, shortened

BRANCH = "branch"  # what the screen is dismissed with after a branch


class SnapshotCommands(Provider):
    """The snapshots screen's keys as command palette entries."""

    @property
    def _snapshots(self) -> SnapshotsScreen:
        return cast("SnapshotsScreen", self.screen)  # the provider of SnapshotsScreen.COMMANDS

    async def discover(self) -> Hits:
        for name, help_text, callback in self._snapshots.palette_commands():
            yield DiscoveryHit(name, callback, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, help_text, callback in self._snapshots.palette_commands():
            if (score := matcher.match(name)) > 0:
                yield Hit(score, matcher.highlight(name), callback, help=help_text)


class SnapshotsScreen(Screen[str | None]):
    """Dismissed with BRANCH after a branch (the caller focuses its prompt), else None."""

    COMMANDS = {SnapshotCommands}
    BINDINGS = [
        Binding("b", "branch", "Branch", tooltip="Restore the selected node; the next turn starts a new branch from it"),
        Binding("r", "rename", "Rename", tooltip="Give the selected node a label"),
        Binding("d", "delete", "Delete", tooltip="Delete the selected node and everything below it"),
        Binding("m", "mark", "Mark", tooltip="Mark the selected node, to compare another one with it"),
        Binding("D,x", "diff", "Diff with mark", key_display="D", tooltip="Compare the selected node with the marked one"),
        Binding("v", "conversation", "Conversation",
                tooltip="Only one of the endpoint's conversations: the next at each press, then all again"),
        Binding("n", "name_conversation", "Name conversation",
                tooltip="Give the conversation shown a name: its first request's node is renamed"),
        Binding("escape", "back", "Back", tooltip="Back to the session"),
    ]

    DEFAULT_CSS = """
    SnapshotsScreen {
        #snapshots-status {
            height: 1;
            padding: 0 1;
            background: $panel;
        }
        #snapshots-status { height: auto; max-height: 2; }
        SnapshotTreeView {
            height: 1fr;
            border: round $panel-lighten-2;
            border-title-color: $foreground;
            &:focus { border: round $accent; }
        }
        SnapshotDetails {
            height: auto;
            max-height: 12;
            padding: 0 1;
            border: round $panel-lighten-2;
            border-title-color: $foreground;
        }
    }
    """

    class Restored(Message):
        def __init__(self, restore: NodeRestore, branch: bool) -> None:
            super().__init__()
            self.restore = restore
            self.branch = branch

    class Failed(Message):
        """A restore or a diff that raised: one line for the status bar."""

        def __init__(self, what: str) -> None:
            super().__init__()
            self.what = what

    class StoreChecked(Message):
        def __init__(self, missing: dict[str, str]) -> None:
            super().__init__()
            self.missing = missing

    class DiffReady(Message):
        def __init__(self, report: DiffReport) -> None:
            super().__init__()
            self.report = report

    def __init__(
        self,
        tree: SnapshotTree,
        *,
        detokenize: Detokenize,
        tokens_known: bool = True,
        restore: Callable[[str], NodeRestore] | None = None,
        restores: MutableMapping[str, NodeRestore] | None = None,
        is_busy: Callable[[], bool] = lambda: False,
        events: EventSource | None = None,
        missing_states: Callable[[Iterable[str]], dict[str, str]] = lambda keys: {},
    ) -> None:
        """`restores` (node id -> its last restore) is shared with the caller, so restores
        survive closing the screen; `is_busy` says the engine is running a turn;
        `missing_states` and `tokens_known` are ConsoleEngine's."""
        super().__init__()
        self._events = events
        self._unfollow: Unsubscribe = lambda: None
        self.snapshot_tree = tree
        self._detokenize = detokenize
        self._tokens_known = tokens_known
        self._restore = restore
        self.restores: MutableMapping[str, NodeRestore] = {} if restores is None else restores
        self._is_busy = is_busy
        self._missing_states = missing_states
        self.missing: dict[str, str] = {}  # the store's last answer for the tree's states
        self.marked: str | None = None
        self.restoring: str | None = None
        self.conversation: Conversation | None = None  # the one shown, None: the whole tree
        self.status_message = ""  # the last thing done, for the status bar
        self.title = "Snapshots"

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        yield Static(id="snapshots-status")
        yield SnapshotTreeView(id="snapshot-tree")
        yield SnapshotDetails(id="snapshot-details")
        yield EffctxFooter()

    def on_mount(self) -> None:
        view = self.query_one(SnapshotTreeView)
        view.border_title = "Snapshot tree"
        self.query_one(SnapshotDetails).border_title = "Node"
        self.refresh_tree()
        if self.snapshot_tree.current is not None:
            view.select_id(self.snapshot_tree.current)
        view.focus()
        # The tree's labels hold copies of its component styles, so a new theme needs new
        # labels. The signal, not a watch on App.theme: it comes after the stylesheet is
        # reapplied, when the component styles hold the new theme's colours.
        self.app.theme_changed_signal.subscribe(self, lambda _theme: self.refresh_tree())
        self._unfollow = post_events(self, self._events)
        self._check_store()

    def on_unmount(self) -> None:
        self._unfollow()

    def on_engine_event(self, message: EngineEvent) -> None:
        event = message.event
        if isinstance(event, PrefillChunk):
            self._restore_progress(event.done, event.total)
        elif isinstance(event, (NodeAdded, NodeRestored, NodeUnsaved)):
            self.refresh_tree()
            self._check_store()  # a restore that found its state damaged quarantined it

    @property
    def selected(self) -> str | None:
        return self.query_one(SnapshotTreeView).selected_id

    # ------------------------------------------------------------------ painting

    def refresh_tree(self) -> None:
        """Show the tree as it is now."""
        if self.marked is not None and self.marked not in self.snapshot_tree:
            self.marked = None
        if self.conversation is not None:
            # Read again: a rename names it anew, a request adds a node, a delete may end it.
            cid = self.conversation.id
            self.conversation = next((c for c in conversations(self.snapshot_tree) if c.id == cid), None)
        self.refresh_bindings()  # Diff comes and goes with the mark, Name conversation with the one shown
        shown = self.conversation
        self.query_one(SnapshotTreeView).show(
            self.snapshot_tree, restores=self.restores, marked=self.marked, restoring=self.restoring,
            missing=self.missing, only=None if shown is None else with_ancestors(self.snapshot_tree, shown.nodes),
        )
        self._show_status()
        self._show_details()

    def _show_status(self) -> None:
        current = self.snapshot_tree.current
        count = len(self.snapshot_tree)
        text = Text(f"{count} node{'s' * (count != 1)}")
        if self.conversation is not None:
            c = self.conversation
            text.append(f" · conversation {c.id} {shortened(c.name, 32)!r}: {format_counted(len(c.nodes), 'request')}")
        if current is not None:
            text.append(f" · at {self._describe(current)}")
        if self.marked is not None:
            text.append(f" · marked {self._describe(self.marked)}")
        if self.status_message:  # a line of its own, so that a narrow screen cuts neither
            text.append("\n")
            text.append(self.status_message, style="italic")
        self.query_one("#snapshots-status", Static).update(text)

    def _show_details(self) -> None:
        node_id = self.selected
        restore = self.restores.get(node_id) if node_id else None
        self.query_one(SnapshotDetails).show(self.snapshot_tree, node_id, restore, self.missing)

    @on(Tree.NodeHighlighted)
    def _highlighted(self) -> None:
        self._show_details()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """A key that cannot act is hidden: no restore without a session to restore into
        (a replay), no diff before a node is marked."""
        if action in ("restore", "branch"):
            return self._restore is not None
        if action == "diff":
            return self.marked is not None
        if action == "conversation":
            return bool(conversations(self.snapshot_tree))  # the endpoint's requests made some
        if action == "name_conversation":
            return self.conversation is not None
        return True

    def _describe(self, node_id: str) -> str:
        return f"{node_id} {shortened(self.snapshot_tree.node(node_id).label, 32)!r}"

    def _idle(self, doing: str) -> bool:
        """True if the engine is free for `doing`; otherwise says why not."""
        if self.restoring is not None:
            self.notify(f"Still restoring {self.restoring}; {doing} when it is done.", severity="warning")
            return False
        if self._is_busy():
            self.notify(f"A reply is still running; {doing} when it is done.", severity="warning")
            return False
        return True

    @work(thread=True, group="snapshot-store", exclusive=True, exit_on_error=False)
    def _check_store(self) -> None:
        try:
            missing = self._missing_states(self.snapshot_tree.blobs())
        except Exception as exc:  # an unreadable store: the tree still shows what it knows
            self.notify(f"The snapshot store could not be read: {exc}", severity="warning")
        else:
            self.post_message(self.StoreChecked(missing))

    @on(StoreChecked)
    def _store_checked(self, message: StoreChecked) -> None:
        if message.missing != self.missing:
            self.missing = message.missing
            self.refresh_tree()

    # ------------------------------------------------------------------ restore and branch

    def action_restore(self) -> None:
        self._start_restore(branch=False)

    def action_branch(self) -> None:
        self._start_restore(branch=True)

    def _start_restore(self, branch: bool) -> None:
        node_id = self.selected
        if node_id is None:
            return
        if self._restore is None:
            self.notify("There is no session to restore into.", severity="warning")
            return
        if not self._idle("restore"):
            return
        self.restoring = node_id
        self.status_message = f"restoring {node_id}…"
        self.refresh_tree()
        self._run_restore(node_id, branch)

    def _restore_progress(self, done: int, total: int) -> None:
        """A recompute's prefill progress."""
        if self.restoring is not None:
            self.status_message = f"restoring {self.restoring}… recomputed {done:,}/{total:,} tokens"
            self._show_status()

    @work(thread=True, group="snapshot-restore", exit_on_error=False)
    def _run_restore(self, node_id: str, branch: bool) -> None:
        assert self._restore is not None  # _start_restore runs this only with a restore
        try:
            restore = self._restore(node_id)
        except Exception as exc:  # the console must survive a failed restore; show one line
            self.post_message(self.Failed(f"restore of {node_id} failed: {exc}"))
        else:
            self.post_message(self.Restored(restore, branch))

    @on(Restored)
    def _restored(self, message: Restored) -> None:
        restore = message.restore
        self.restoring = None
        self.restores[restore.node] = restore
        self.status_message = f"restored {restore.node}: {restore_summary(restore)}"
        self.refresh_tree()
        if message.branch and self.is_current:
            self.dismiss(BRANCH)

    @on(Failed)
    def _failed(self, message: Failed) -> None:
        self.restoring = None
        self.status_message = message.what
        self.refresh_tree()
        self.notify(message.what, severity="error")

    # ------------------------------------------------------------------ rename and delete

    def action_rename(self) -> None:
        node_id = self.selected
        if node_id is None:
            return

        def rename(label: str | None) -> None:
            if label is not None and node_id in self.snapshot_tree:
                self.snapshot_tree.rename(node_id, label)
                self.status_message = f"renamed {node_id}"
                self.refresh_tree()

        self.app.push_screen(RenameDialog(node_id, self.snapshot_tree.node(node_id).label), rename)

    def action_name_conversation(self) -> None:
        """The conversation's name is its first node's label (snapshots/conversations.py):
        renaming that node names it, and the name is kept with the tree."""
        shown = self.conversation
        if shown is None:
            return
        first = shown.nodes[0]

        def name(new: str | None) -> None:
            if new and first in self.snapshot_tree:  # an empty name keeps the one it has
                self.snapshot_tree.rename(first, conversation_label(shown.id, new))
                self.status_message = f"named conversation {shown.id}"
                self.refresh_tree()

        self.app.push_screen(RenameDialog(f"conversation {shown.id}", shown.name, noun="name"), name)

    def action_delete(self) -> None:
        node_id = self.selected
        if node_id is None:
            return
        parent = self.snapshot_tree.node(node_id).parent
        if parent is None:
            self.notify("The root cannot be deleted; delete its children instead.", severity="warning")
            return
        if not self._idle("delete"):
            return
        below = self._descendants(node_id)
        what = f"and its {below} descendant{'s' * (below != 1)}" if below else "(it has no children)"
        # as Checkpointer.save_session does, and the session is saved as this screen closes
        question = (f"Delete {self._describe(node_id)} {what}? Their saved states leave the store when the "
                    f"session is saved, unless another session or the prefix cache keeps them.")

        def delete(yes: bool | None) -> None:
            if not yes or node_id not in self.snapshot_tree or not self._idle("delete"):
                return
            removed = self.snapshot_tree.delete_subtree(node_id)
            for gone in removed:
                self.restores.pop(gone, None)
            self.status_message = f"deleted {len(removed)} node{'s' * (len(removed) != 1)}"
            self.refresh_tree()
            self.query_one(SnapshotTreeView).select_id(parent)

        self.app.push_screen(ConfirmDialog(question), delete)

    def _descendants(self, node_id: str) -> int:
        children = self.snapshot_tree.children(node_id)
        return len(children) + sum(self._descendants(c.id) for c in children)

    # ------------------------------------------------------------------ diff

    def action_mark(self) -> None:
        node_id = self.selected
        if node_id is None:
            return
        self.marked = None if self.marked == node_id else node_id
        self.status_message = "select another node and press D to compare" if self.marked else "mark cleared"
        self.refresh_tree()

    def action_diff(self) -> None:
        node_id = self.selected
        if self.marked is None:
            self.notify("Mark a node with m first, then select another and press D.", severity="warning")
            return
        if node_id is None or node_id == self.marked:
            self.notify("Select a node other than the marked one.", severity="warning")
            return
        if not self._idle("compare"):
            return
        self._run_diff(self.marked, node_id)

    @work(thread=True, group="snapshot-diff", exclusive=True, exit_on_error=False)
    def _run_diff(self, a: str, b: str) -> None:
        try:
            report = describe_diff(self.snapshot_tree, a, b, self._detokenize, self._tokens_known)
        except Exception as exc:
            self.post_message(self.Failed(f"diff of {a} and {b} failed: {exc}"))
        else:
            self.post_message(self.DiffReady(report))

    @on(DiffReady)
    def _diff_ready(self, message: DiffReady) -> None:
        self.app.push_screen(DiffScreen(message.report))

    # ------------------------------------------------------------------ the rest

    def action_conversation(self) -> None:
        found = conversations(self.snapshot_tree)
        ids = [c.id for c in found]
        now = ids.index(self.conversation.id) if self.conversation is not None and self.conversation.id in ids else -1
        self.conversation = found[now + 1] if now + 1 < len(found) else None
        self.refresh_tree()

    def action_back(self) -> None:
        self.dismiss(None)

    def palette_commands(self) -> Iterable[tuple[str, str, Callable[[], None]]]:
        yield "Restore snapshot", "Go back to the selected node", self.action_restore
        yield "Branch from snapshot", "Restore the selected node and continue from it", self.action_branch
        yield "Rename snapshot", "Give the selected node a new label", self.action_rename
        yield "Delete snapshot", "Delete the selected node and everything below it", self.action_delete
        yield "Mark snapshot for diff", "Compare it later with another node", self.action_mark
        yield "Diff with marked snapshot", "Where the marked and the selected node part", self.action_diff
