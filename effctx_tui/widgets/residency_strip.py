"""The whole tape squeezed into one line, for screens that have no room for the full view.

Each cell covers a range of tokens and shows the most telling class in it (see
`residency_tape.STRIP_PRECEDENCE`: evicted > cold > sink > recent > hot), so a small
eviction in a long tape stays visible. Every line of a taller strip repeats the tape.
"""

from __future__ import annotations

import numpy as np
from rich.segment import Segment
from textual.strip import Strip
from textual.widget import Widget

from effctx_core.residency.blocks import BlockClass, BlockTable
from effctx_tui.widgets.residency_palette import component_css, component_names
from effctx_tui.widgets.residency_tape import squeeze_classes

_PREFIX = "residency-strip"
_CLASS_COMPONENTS = component_names(_PREFIX)


class ResidencyStrip(Widget):
    COMPONENT_CLASSES = set(_CLASS_COMPONENTS.values())

    DEFAULT_CSS = "ResidencyStrip {\n    height: 1;\n" + component_css(_PREFIX, cursor=False) + "\n}\n"

    def __init__(
        self,
        table: BlockTable | None = None,
        *,
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self._table = table if table is not None else BlockTable.empty()
        self._line: tuple[int, Strip] | None = None  # (width, strip) of the last render

    @property
    def table(self) -> BlockTable:
        return self._table

    def set_table(self, table: BlockTable) -> None:
        """Show another table; the squeeze is computed lazily at the next paint."""
        self._table = table
        self._line = None
        self.refresh()

    def cell_classes(self) -> list[BlockClass]:
        """The class of each cell at the current width, left to right."""
        return [BlockClass(int(c)) for c in squeeze_classes(self._table, self.size.width)]

    def notify_style_update(self) -> None:
        self._line = None
        super().notify_style_update()

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        if self._line is None or self._line[0] != width:
            self._line = (width, self._build(width))
        return self._line[1]

    def _build(self, width: int) -> Strip:
        classes = squeeze_classes(self._table, width)
        if not len(classes):
            return Strip.blank(width, self.rich_style)
        edges = np.flatnonzero(classes[1:] != classes[:-1]) + 1
        starts = np.concatenate(([0], edges)).tolist()
        stops = np.concatenate((edges, [len(classes)])).tolist()
        segments = [
            Segment(
                " " * (b - a),
                self.get_component_rich_style(_CLASS_COMPONENTS[BlockClass(int(classes[a]))]),
            )
            for a, b in zip(starts, stops)
        ]
        return Strip(segments, width)
