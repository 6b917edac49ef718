"""The token tape as rows of coloured cells, one colour per block class.

A Line-API scroll view (the pattern of toolong's log_lines.py): the tape of a 128k or 1M
token context is never drawn whole; `render_line` builds only the visible rows, each
from a numpy slice, and keeps the built rows in an LRU cache until the table, the zoom,
the width or the styles change. The cursor is part of a row's cache key, so moving it
re-renders the rows it left and entered, nothing else.
"""

from __future__ import annotations

from math import ceil

import numpy as np
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding
from textual.cache import LRUCache
from textual.geometry import Size, clamp
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from effctx_core.residency.blocks import Block, BlockClass, BlockTable
from effctx_tui.widgets.residency_palette import component_css, component_names
from effctx_tui.widgets.residency_tape import Zoom, cell_blocks, cell_count, cell_of_token

_PREFIX = "residency-view"
_CLASS_COMPONENTS = component_names(_PREFIX)
_CURSOR_COMPONENT = f"{_PREFIX}--cursor"

# A cell's kind is class * 4 + variant; the variant says what is drawn on the colour.
_BOUNDARY, _CURSOR = 1, 2
_VARIANTS = 4
# In token zoom a block is many cells; a thin mark on its first token shows where blocks
# begin inside a run of one class. The cursor block's cells carry a bright glyph so the
# block stays findable without hiding its class colour.
_GLYPHS: dict[Zoom, tuple[str, str, str, str]] = {
    Zoom.BLOCK: (" ", " ", "◆", "◆"),
    Zoom.TOKEN: (" ", "▏", "━", "━"),
}


class ResidencyView(ScrollView, can_focus=True, inherit_bindings=False):
    """The tape, `cells_per_row` cells a row, with a cursor that selects one block."""

    BINDINGS = [
        Binding("left,h", "move(-1)", "Block", key_display="←→", show=True, tooltip="The block before the cursor"),
        Binding("right,l", "move(1)", "Next block", show=False, tooltip="The block after the cursor"),
        Binding("up,k", "move_rows(-1)", "Row", key_display="↑↓", show=True, tooltip="One row up"),
        Binding("down,j", "move_rows(1)", "Next row", show=False, tooltip="One row down"),
        Binding("pageup", "move_pages(-1)", "Page up", show=False, tooltip="One page up"),
        Binding("pagedown", "move_pages(1)", "Page down", show=False, tooltip="One page down"),
        Binding("home", "first", "First block", show=False, tooltip="The first block of the tape"),
        Binding("end", "last", "Last block", show=False, tooltip="The last block of the tape"),
        Binding("z,plus", "zoom(1)", "Zoom", show=True, tooltip="Zoom in: fewer tokens per cell, down to one"),
        Binding("Z,minus", "zoom(-1)", "Zoom out", show=False, tooltip="Zoom out: more tokens per cell"),
    ]

    COMPONENT_CLASSES = {*_CLASS_COMPONENTS.values(), _CURSOR_COMPONENT}

    DEFAULT_CSS = (
        "ResidencyView {\n"
        "    scrollbar-gutter: stable;\n"
        "    overflow-x: hidden;\n"
        "    overflow-y: auto;\n"
        "    scrollbar-size-vertical: 1;\n"
        + component_css(_PREFIX)
        + "\n}\n"
    )

    zoom: reactive[Zoom] = reactive(Zoom.BLOCK)

    class BlockSelected(Message):
        """The cursor moved to another block (not posted by `set_table`)."""

        def __init__(self, block: Block, view: "ResidencyView | None" = None) -> None:
            super().__init__()
            self.block = block
            self.view = view

        @property
        def control(self) -> "ResidencyView | None":
            return self.view

    def __init__(
        self,
        table: BlockTable | None = None,
        *,
        zoom: Zoom = Zoom.BLOCK,
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self._table = table if table is not None else BlockTable.empty()
        self._cursor = 0
        # The original position the user navigated to. The cursor block is the block
        # holding it, so a new table keeps the cursor on the same token, and repeated
        # up/down in token zoom keep their column instead of snapping to block starts.
        self._anchor = 0
        self._cells_per_row = 1
        self._rows: LRUCache[tuple[int, int, Zoom, int], Strip] = LRUCache(1024)
        self._kind_styles: list[Style] | None = None
        self._base_style: Style | None = None
        # Segments are immutable; a row of a mixed tape is dozens of short runs, and
        # building each anew is most of a redraw, so they are shared by (zoom, kind, length).
        self._segments: dict[tuple[Zoom, int, int], Segment] = {}
        self.set_reactive(ResidencyView.zoom, zoom)

    # ------------------------------------------------------------------ public API

    @property
    def table(self) -> BlockTable:
        return self._table

    @property
    def cursor_index(self) -> int | None:
        return self._cursor if len(self._table) else None

    @property
    def cursor_block(self) -> Block | None:
        return self._table.block(self._cursor) if len(self._table) else None

    @property
    def cells_per_row(self) -> int:
        return self._cells_per_row

    @property
    def cell_count(self) -> int:
        return cell_count(self._table, self.zoom)

    @property
    def row_count(self) -> int:
        return ceil(self.cell_count / self._cells_per_row)

    def set_table(self, table: BlockTable) -> None:
        """Show another table (a live update). Costs O(log blocks) plus a repaint of the
        visible rows; the cursor stays on the same original token when the tape has it."""
        self._table = table
        self._rows.clear()
        if len(table):
            self._anchor = min(self._anchor, table.n_tokens - 1)
            self._cursor = table.block_at(self._anchor)
        else:
            self._cursor = self._anchor = 0
        self._update_layout()
        self.refresh()

    def move_cursor_to_token(self, token: int) -> None:
        if len(self._table):
            token = clamp(token, 0, self._table.n_tokens - 1)
            self._select(self._table.block_at(token), anchor=token)

    def clear_caches(self) -> None:
        self._rows.clear()
        self._kind_styles = None
        self._base_style = None
        self._segments.clear()

    # ------------------------------------------------------------------ actions

    def action_move(self, blocks: int) -> None:
        self._select(self._cursor + blocks)

    def action_move_rows(self, rows: int) -> None:
        self._move_cells(rows * self._cells_per_row)

    def action_move_pages(self, pages: int) -> None:
        # scroll a page first so the cursor keeps its place on screen, as pagers do
        page = max(1, self.scrollable_content_region.height)
        self.scroll_to(y=self.scroll_offset.y + pages * page, animate=False, immediate=True, force=True)
        self._move_cells(pages * page * self._cells_per_row)

    def action_first(self) -> None:
        self._select(0)

    def action_last(self) -> None:
        self._select(len(self._table) - 1)

    def action_zoom(self, delta: int) -> None:
        self.zoom = self.zoom.step(delta)

    # ------------------------------------------------------------------ cursor

    def _move_cells(self, cells: int) -> None:
        if self.zoom is Zoom.BLOCK:
            self._select(self._cursor + cells)
        else:
            self.move_cursor_to_token(self._anchor + cells)

    def _select(self, index: int, anchor: int | None = None) -> None:
        if not len(self._table):
            return
        index = clamp(index, 0, len(self._table) - 1)
        self._anchor = int(self._table.start[index]) if anchor is None else anchor
        moved = index != self._cursor
        self._cursor = index
        self._scroll_to_cursor()
        if moved:
            self.refresh()
            self.post_message(self.BlockSelected(self._table.block(index), self))

    def _cursor_cells(self) -> tuple[int, int]:
        """The [first, stop) cells that draw the cursor block."""
        if self.zoom is Zoom.BLOCK:
            return self._cursor, self._cursor + 1
        return int(self._table.start[self._cursor]), int(self._table.end[self._cursor])

    def _scroll_to_cursor(self) -> None:
        if not len(self._table):
            return
        row = cell_of_token(self._table, self.zoom, self._anchor) // self._cells_per_row
        height = max(1, self.scrollable_content_region.height)
        top = self.scroll_offset.y
        if row < top:
            self.scroll_to(y=row, animate=False, immediate=True, force=True)
        elif row >= top + height:
            self.scroll_to(y=row - height + 1, animate=False, immediate=True, force=True)

    # ------------------------------------------------------------------ layout

    def _update_layout(self) -> None:
        width = max(1, self.scrollable_content_region.width)
        if width != self._cells_per_row:
            self._cells_per_row = width
            self._rows.clear()
        self.virtual_size = Size(width, self.row_count)

    def on_mount(self) -> None:
        self._update_layout()

    def on_resize(self, event: events.Resize) -> None:
        self._update_layout()
        self._scroll_to_cursor()

    def watch_zoom(self, old: Zoom, new: Zoom) -> None:
        self._rows.clear()
        self._update_layout()
        self._scroll_to_cursor()
        self.refresh()

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None or offset.x >= self._cells_per_row:
            return
        cell = (offset.y + self.scroll_offset.y) * self._cells_per_row + offset.x
        if cell >= self.cell_count:
            return
        if self.zoom is Zoom.BLOCK:
            self._select(cell)
        else:
            self.move_cursor_to_token(cell)

    # ------------------------------------------------------------------ rendering

    def notify_style_update(self) -> None:
        self.clear_caches()
        super().notify_style_update()

    def _styles(self) -> list[Style]:
        if self._kind_styles is None:
            cursor = self.get_component_rich_style(_CURSOR_COMPONENT, partial=True)
            styles: list[Style] = []
            for cls in BlockClass:  # kinds are numbered class * 4 + variant
                base = self.get_component_rich_style(_CLASS_COMPONENTS[cls])
                styles += [base, base, base + cursor, base + cursor]
            self._kind_styles = styles
        return self._kind_styles

    def render_line(self, y: int) -> Strip:
        row = self.scroll_offset.y + y
        width = self.size.width
        if self._base_style is None:
            self._base_style = self.rich_style
        if row >= self.row_count:
            return Strip.blank(width, self._base_style)
        return self._row(row).adjust_cell_length(width, self._base_style)

    def _row(self, row: int) -> Strip:
        per_row = self._cells_per_row
        first = row * per_row
        stop = min(first + per_row, self.cell_count)
        cursor_first, cursor_stop = self._cursor_cells()
        has_cursor = cursor_first < stop and cursor_stop > first
        key = (row, per_row, self.zoom, self._cursor if has_cursor else -1)
        strip = self._rows.get(key)
        if strip is None:
            strip = self._rows[key] = self._build_row(first, stop)
        return strip

    def _build_row(self, first: int, stop: int) -> Strip:
        table = self._table
        blocks = cell_blocks(table, self.zoom, first, stop)
        kinds = table.cls[blocks].astype(np.int16) * _VARIANTS
        if self.zoom is Zoom.TOKEN:
            kinds += _BOUNDARY * (np.arange(first, stop) == table.start[blocks])
        kinds += _CURSOR * (blocks == self._cursor)
        # one segment per run of equal kinds: a row is a handful of segments, not a
        # segment per cell
        edges = np.flatnonzero(kinds[1:] != kinds[:-1]) + 1
        starts = np.concatenate(([0], edges))
        lengths = np.diff(np.append(starts, len(kinds))).tolist()
        run_kinds = kinds[starts].tolist()
        styles = self._styles()
        zoom = self.zoom
        glyphs = _GLYPHS[zoom]
        cache = self._segments
        segments = []
        for kind, length in zip(run_kinds, lengths):
            segment = cache.get((zoom, kind, length))
            if segment is None:
                segment = Segment(glyphs[kind % _VARIANTS] * length, styles[kind])
                cache[(zoom, kind, length)] = segment
            segments.append(segment)
        return Strip(segments, stop - first)
