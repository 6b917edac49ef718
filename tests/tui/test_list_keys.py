"""Home and End go to the first and last row of every list of the console."""

from __future__ import annotations

from importlib import resources
from typing import Callable

from textual.app import App, ComposeResult
from textual.widget import Widget
from textual.widgets import OptionList

from effctx_core.events.reader import read_trace
from effctx_tui.app import EffctxApp
from effctx_tui.screens.snapshots import SnapshotsScreen
from effctx_tui.widgets.lists import ListTable, ListTree
from effctx_tui.widgets.snapshot_tree import SnapshotTreeView
from tests.helpers.pilot_wait import wait_for


class ListsApp(App):
    def compose(self) -> ComposeResult:
        yield ListTable(id="rows", cursor_type="row")
        yield ListTable(id="plain", cursor_type="none")
        tree: ListTree = ListTree("root", id="tree")
        for i in range(30):
            tree.root.add_leaf(f"leaf {i}")
        tree.root.expand()
        yield tree

    def on_mount(self) -> None:
        for table in self.query(ListTable):
            table.styles.height = 8
            table.add_columns("n", "square")
            table.add_rows([(str(i), str(i * i)) for i in range(30)])
        self.query_one("#tree").styles.height = 8


async def end_then_home(pilot, widget: Widget, where: Callable[[], object]) -> tuple[object, object]:
    """`where` the focused widget is after End, then after Home."""
    widget.focus()
    await pilot.press("end")
    await pilot.wait_for_scheduled_animations()
    after_end = where()
    await pilot.press("home")
    await pilot.wait_for_scheduled_animations()
    return after_end, where()


async def test_home_and_end_move_a_row_cursor_to_the_first_and_last_row():
    app = ListsApp()
    async with app.run_test(size=(60, 30)) as pilot:
        table = app.query_one("#rows", ListTable)
        assert await end_then_home(pilot, table, lambda: table.cursor_row) == (29, 0)


async def test_home_and_end_scroll_a_table_without_a_cursor_to_its_top_and_bottom():
    app = ListsApp()
    async with app.run_test(size=(60, 30)) as pilot:
        table = app.query_one("#plain", ListTable)
        assert table.max_scroll_y > 0
        assert await end_then_home(pilot, table, lambda: table.scroll_y) == (table.max_scroll_y, 0)


async def test_home_and_end_move_a_tree_cursor_to_its_first_and_last_line():
    app = ListsApp()
    async with app.run_test(size=(60, 30)) as pilot:
        tree = app.query_one("#tree", ListTree)
        assert await end_then_home(pilot, tree, lambda: str(tree.cursor_node.label)) == ("leaf 29", "root")


async def test_home_and_end_walk_the_snapshot_tree_of_the_chat_demo():
    with resources.as_file(resources.files("effctx_tui") / "demos" / "chat.jsonl") as path:
        app = EffctxApp(replay=read_trace(path), replay_speed=64)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: app.player.done and app.session_screen.turns_done == 3, seconds=30)
        await pilot.press("ctrl+t")
        assert isinstance(app.screen, SnapshotsScreen)
        tree = app.screen.query_one(SnapshotTreeView)
        assert tree.last_line > 0
        assert await end_then_home(pilot, tree, lambda: tree.cursor_line) == (tree.last_line, 0)


async def test_home_and_end_go_to_the_first_and_last_evicted_range():
    from tests.tui.test_residency_screen import ResidencyApp

    app = ResidencyApp()
    async with app.run_test(size=(100, 30)) as pilot:
        ranges = app.screen.query_one("#evicted-ranges", OptionList)
        assert ranges.option_count > 1
        assert await end_then_home(pilot, ranges, lambda: ranges.highlighted) == (ranges.option_count - 1, 0)
