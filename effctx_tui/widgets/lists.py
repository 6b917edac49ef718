"""Home and End in every list of the console go to its first and last row.

Textual's DataTable gives Home and End to the columns (a row cursor only scrolls
sideways) and its Tree scrolls without moving the cursor, so a list built on either
takes its widget from here. OptionList and the residency view have the keys already.
"""

from __future__ import annotations

from textual.binding import Binding
from textual.widgets import DataTable, Tree


class ListTable(DataTable):
    """A DataTable whose Home and End go to the first and last row (with no cursor,
    scroll to the top and the bottom); Ctrl+Home and Ctrl+End do the same."""

    BINDINGS = [
        Binding("home", "scroll_top", "First row", show=False, tooltip="Go to the first row"),
        Binding("end", "scroll_bottom", "Last row", show=False, tooltip="Go to the last row"),
    ]


class ListTree(Tree[str]):
    """A Tree whose Home and End put the cursor on its first and last line."""

    BINDINGS = [
        Binding("home", "first", "First", show=False, tooltip="Go to the first node"),
        Binding("end", "last", "Last", show=False, tooltip="Go to the last node"),
    ]

    def action_first(self) -> None:
        self.cursor_line = 0

    def action_last(self) -> None:
        self.cursor_line = self.last_line
