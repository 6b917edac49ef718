"""The requests table: one line per request of the endpoint, the newest first.

A Line-API scroll view (as the residency view): only the visible lines are built, from the
RequestLog's rows, so ten thousand requests draw as fast as ten. The view keeps the arrival
indices of the rows its filter shows, in arrival order, and draws them backwards. A new
request is appended; a request that matches the filter only once it is served (its
conversation is known then) is inserted at its place by bisection: nothing is sorted or
rebuilt when a request comes or goes (a new filter rebuilds the indices once).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding
from textual.geometry import Size, clamp
from textual.scroll_view import ScrollView
from textual.strip import Strip

from effctx_core.events.requests import RequestLog, RequestRow
from effctx_core.units import format_count
from effctx_tui.themes import rich_style
from effctx_tui.widgets.request_cells import (
    STYLES,
    clock,
    decode_cell,
    route_words,
    status_cell,
    ttft_cell,
    where_cell,
)


@dataclass(frozen=True)
class Column:
    title: str
    width: int  # cells; the divergence column's is its least, it takes the room left
    right: bool = False  # numbers are right-aligned


# Status comes early: at 100 columns the last ones scroll sideways, and a live table's
# first question is what each request is doing.
COLUMNS = (
    Column("time", 8), Column("conv", 4), Column("status", 18), Column("prompt", 6, True),
    Column("reused", 6, True), Column("computed", 8, True), Column("route", 12), Column("diverged", 16),
    Column("TTFT", 7, True), Column("decode", 11, True), Column("finish", 10),
)
FLEX = next(i for i, column in enumerate(COLUMNS) if column.title == "diverged")  # it takes the room left
GAP = 1


@dataclass(frozen=True)
class RequestFilter:
    conversation: str | None = None  # one conversation's requests, or every request
    misses: bool = False

    @property
    def narrows(self) -> bool:
        return self.conversation is not None or self.misses

    def matches(self, row: RequestRow) -> bool:
        if not self.narrows:
            return True
        if row.served is None:
            return False  # its conversation, and whether it missed, are known once it is served
        return (self.conversation is None or row.conversation == self.conversation) and (not self.misses or row.miss)

    def describe(self) -> str:
        who = f"conversation {self.conversation}" if self.conversation is not None else "all conversations"
        return f"{who} · {'misses only' if self.misses else 'hits and misses'}"


def row_cells(row: RequestRow, log: RequestLog) -> list[tuple[str, str]]:
    """The row's cells, (text, style role), in COLUMNS order."""
    served = row.served
    counts = [("", "")] * 2
    if served is not None and served.turn > 0:  # a request refused or left in the queue computed nothing
        counts = [(format_count(served.reused), "good"), (format_count(served.computed), "")]
    return [
        (clock(log.wall_time(row)), "muted"),
        (row.conversation or ("–" if served is not None else ""), ""),
        status_cell(row),
        (format_count(row.prompt_tokens) if row.prompt_tokens else "", ""),
        *counts,
        (route_words(row.route, row.node), "warn" if row.route == "cold" else ""),
        where_cell(row),
        (ttft_cell(row), ""),
        (decode_cell(row), ""),
        (served.finish if served is not None else "", ""),
    ]


def fit(text: str, width: int, right: bool) -> str:
    """`text` in exactly `width` cells: cut with an ellipsis, or padded."""
    if cell_len(text) > width:
        return set_cell_size(text, width - 1) + "…"
    pad = " " * (width - cell_len(text))
    return pad + text if right else text + pad


class RequestTable(ScrollView, can_focus=True, inherit_bindings=False):
    BINDINGS = [
        Binding("up,k", "move(-1)", "Newer", show=False, tooltip="The request above: the next newer one"),
        Binding("down,j", "move(1)", "Older", show=False, tooltip="The request below: the next older one"),
        Binding("pageup", "page(-1)", "Page up", show=False, tooltip="One page of newer requests"),
        Binding("pagedown", "page(1)", "Page down", show=False, tooltip="One page of older requests"),
        Binding("home", "first", "Newest", show=False, tooltip="The newest request"),
        Binding("end", "last", "Oldest", show=False, tooltip="The oldest request"),
        Binding("left", "sideways(-1)", "Scroll left", show=False, tooltip="Scroll the columns left"),
        Binding("right", "sideways(1)", "Scroll right", show=False, tooltip="Scroll the columns right"),
    ]

    COMPONENT_CLASSES = {"request-table--header", "request-table--cursor"}

    DEFAULT_CSS = """
    RequestTable {
        background: $surface;
        color: $foreground;
        scrollbar-size-vertical: 1;
        & > .request-table--header { background: $panel; color: $foreground; text-style: bold; }
        & > .request-table--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
        }
        &:focus > .request-table--cursor {
            background: $block-cursor-background;
            color: $block-cursor-foreground;
            text-style: bold;
        }
    }
    """

    def __init__(self, log: RequestLog, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.request_log = log
        self.filter = RequestFilter()
        self._shown: list[int] = []  # arrival indices of the rows shown, ascending
        self._cursor: int | None = None  # the arrival index of the request under the cursor
        self._seen = (-1, 0, 0)  # the log's version, rows and served rows taken in
        self._widths = [column.width for column in COLUMNS]
        self._styles: dict[str, Style] = {}

    # ------------------------------------------------------------------ what is shown

    @property
    def shown(self) -> int:
        return len(self._shown)

    @property
    def cursor_row(self) -> RequestRow | None:
        return self.request_log.rows[self._cursor] if self._cursor is not None else None

    def row_at(self, display: int) -> RequestRow:
        """The row drawn `display` lines under the header (0: the newest shown)."""
        return self.request_log.rows[self._shown[len(self._shown) - 1 - display]]

    def set_filter(self, new: RequestFilter) -> None:
        """Show the rows `new` lets through: the one rebuild of the indices."""
        self.filter = new
        self._shown = [row.index for row in self.request_log.rows if new.matches(row)]
        self._seen = (self.request_log.version, len(self.request_log.rows), len(self.request_log.served))
        if self._cursor is not None and not self._has(self._cursor):
            # the nearest older request shown, else the oldest one
            at = bisect_left(self._shown, self._cursor)
            self._cursor = self._shown[at - 1] if at else (self._shown[0] if self._shown else None)
        self._settle(0)
        self.scroll_to(y=0, animate=False, immediate=True, force=True)
        self._scroll_to_cursor()

    def _has(self, index: int) -> bool:
        at = bisect_left(self._shown, index)
        return at < len(self._shown) and self._shown[at] == index

    def sync(self) -> bool:
        """Take in what the log has had since the last call; True when anything changed."""
        log = self.request_log
        version, rows, served = self._seen
        if log.version == version:
            return False
        self._seen = (log.version, len(log.rows), len(log.served))
        # A row that arrives already served is both new and served: _add takes it once.
        fresh = range(rows, len(log.rows))
        ended = log.served[served:] if self.filter.narrows else []
        above = sum(self._add(index) for index in (*fresh, *ended) if self.filter.matches(log.rows[index]))
        self._settle(above)
        return True

    def _add(self, index: int) -> bool:
        """Show the row at its place; True when it went above the top line in view."""
        if self._has(index):
            return False
        at = bisect_left(self._shown, index)
        self._shown.insert(at, index)
        return len(self._shown) - 1 - at < self.scroll_offset.y

    def _settle(self, above: int) -> None:
        """After rows came: the size, the cursor, and the same rows in view when the view is
        not at the top (rows inserted above it push it down by as many)."""
        if self._cursor is None and self._shown:
            self._cursor = self._shown[-1]
        self.virtual_size = Size(sum(self._widths) + GAP * len(self._widths) + 1, len(self._shown) + 1)
        if above:
            self.scroll_to(y=self.scroll_offset.y + above, animate=False, immediate=True, force=True)
        self.refresh()

    # ------------------------------------------------------------------ the cursor

    def _display(self, index: int) -> int:
        return len(self._shown) - 1 - bisect_left(self._shown, index)

    def select_display(self, display: int) -> None:
        if not self._shown:
            return
        display = clamp(display, 0, len(self._shown) - 1)
        self._cursor = self._shown[len(self._shown) - 1 - display]
        self._scroll_to_cursor()
        self.refresh()

    def _scroll_to_cursor(self) -> None:
        if self._cursor is None:
            return
        display = self._display(self._cursor)
        rows = max(1, self.scrollable_content_region.height - 1)  # under the header
        top = self.scroll_offset.y
        if display < top:
            self.scroll_to(y=display, animate=False, immediate=True, force=True)
        elif display >= top + rows:
            self.scroll_to(y=display - rows + 1, animate=False, immediate=True, force=True)

    def action_move(self, rows: int) -> None:
        if self._cursor is not None:
            self.select_display(self._display(self._cursor) + rows)

    def action_page(self, pages: int) -> None:
        self.action_move(pages * max(1, self.scrollable_content_region.height - 1))

    def action_first(self) -> None:
        self.select_display(0)

    def action_last(self) -> None:
        self.select_display(len(self._shown) - 1)

    def action_sideways(self, direction: int) -> None:
        self.scroll_to(x=self.scroll_offset.x + 8 * direction, animate=False, immediate=True)

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is not None and offset.y >= 1:
            display = self.scroll_offset.y + offset.y - 1
            if display < len(self._shown):
                self.select_display(display)

    # ------------------------------------------------------------------ layout and drawing

    def on_resize(self) -> None:
        fixed = sum(c.width for i, c in enumerate(COLUMNS) if i != FLEX) + GAP * len(COLUMNS) + 1
        self._widths[FLEX] = max(COLUMNS[FLEX].width, self.scrollable_content_region.width - fixed)
        self._settle(0)
        self._scroll_to_cursor()

    def on_mount(self) -> None:
        # The cells' colours are the theme's as of their drawing: a new theme draws them anew.
        self.app.theme_changed_signal.subscribe(self, lambda _theme: self._restyle())

    def notify_style_update(self) -> None:
        self._styles.clear()
        super().notify_style_update()

    def _restyle(self) -> None:
        self._styles.clear()
        self.refresh()

    def _style(self, role: str) -> Style:
        """The widget's own style ("") with a role's colour, or a component's ("header", "cursor")."""
        style = self._styles.get(role)
        if style is None:
            if role in ("header", "cursor"):
                style = self.get_component_rich_style(f"request-table--{role}")
            elif STYLES[role]:
                style = self._style("") + rich_style(self, STYLES[role])
            else:
                style = self.rich_style
            self._styles[role] = style
        return style

    def _line(self, cells: list[tuple[str, str]], base: str = "") -> Strip:
        """A row of `cells`; under a component's style (`base`) in that style alone."""
        plain = self._style(base)
        segments = [Segment(" ", plain)]
        for column, width, (text, role) in zip(COLUMNS, self._widths, cells):
            segments.append(Segment(fit(text, width, column.right), self._style(role) if not base else plain))
            segments.append(Segment(" " * GAP, plain))
        return Strip(segments)

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        x, base = self.scroll_offset.x, ""
        if y == 0:
            base = "header"
            line = self._line([(c.title, "") for c in COLUMNS], base)
        elif (display := self.scroll_offset.y + y - 1) < len(self._shown):
            row = self.row_at(display)
            base = "cursor" if row.index == self._cursor else ""
            line = self._line(row_cells(row, self.request_log), base)
        elif y == 1:  # the empty table says why it is empty, wherever it is scrolled
            empty = "no requests in this session" if not self.request_log.rows else f"nothing to show for {self.filter.describe()}"
            line, x = Strip([Segment(f" {empty}", self._style("muted"))]), 0
        else:
            return Strip.blank(width, self._style(""))
        return line.crop(x, x + width).extend_cell_length(width, self._style(base))
