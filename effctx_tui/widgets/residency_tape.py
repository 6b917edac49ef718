"""Cells of the token tape: which block (and so which class) each drawn cell shows.

Pure numpy, no Textual: the residency view asks for one row at a time and the strip for
one squeezed line, so a 1M-token tape never costs a Python loop over its tokens.
"""

from __future__ import annotations

from enum import Enum

import numpy as np

from effctx_core.residency.blocks import BlockClass, BlockTable


class Zoom(str, Enum):
    """How much tape one cell stands for, from the widest view to the closest."""

    BLOCK = "block"  # one cell per block, whatever its size
    TOKEN = "token"  # one cell per token (original position)

    @property
    def caption(self) -> str:
        return f"1 cell = 1 {self.value}"

    def step(self, delta: int) -> "Zoom":
        levels = list(Zoom)
        return levels[(levels.index(self) + delta) % len(levels)]


def cell_count(table: BlockTable, zoom: Zoom) -> int:
    return len(table) if zoom is Zoom.BLOCK else table.n_tokens


def cell_blocks(table: BlockTable, zoom: Zoom, first: int, stop: int) -> np.ndarray:
    """Block index of every cell in [first, stop)."""
    cells = np.arange(first, stop, dtype=np.int64)
    if zoom is Zoom.BLOCK:
        return cells
    return np.searchsorted(table.end, cells, side="right")


def cell_of_token(table: BlockTable, zoom: Zoom, token: int) -> int:
    """The cell that draws original position `token`."""
    return table.block_at(token) if zoom is Zoom.BLOCK else token


# The strip squeezes many tokens into one cell and must pick one class for it. A 16-token
# eviction inside a 2,000-token cell is exactly what a user hunting a forgotten passkey
# needs to see, and the sink is a handful of tokens, so a cell shows the most telling
# class it contains, not the majority: evicted > cold > sink > recent > hot.
STRIP_PRECEDENCE: tuple[BlockClass, ...] = (
    BlockClass.HOT,
    BlockClass.RECENT,
    BlockClass.SINK,
    BlockClass.COLD,
    BlockClass.EVICTED,
)
_RANK_OF_CLASS = np.zeros(len(BlockClass), dtype=np.int8)
for _rank, _cls in enumerate(STRIP_PRECEDENCE):
    _RANK_OF_CLASS[int(_cls)] = _rank
_CLASS_OF_RANK = np.array([int(c) for c in STRIP_PRECEDENCE], dtype=np.int8)


def squeeze_classes(table: BlockTable, width: int) -> np.ndarray:
    """The class each of `width` cells shows when the whole tape is fit into them.

    Cell i covers tokens [i*n//width, (i+1)*n//width), at least one token, so a tape
    shorter than the width repeats tokens rather than leaving holes.
    """
    n = table.n_tokens
    if n == 0 or width <= 0:
        return np.zeros(0, dtype=np.int8)
    i = np.arange(width, dtype=np.int64)
    first = i * n // width
    last = np.maximum(first, (i + 1) * n // width - 1)
    b_first = np.searchsorted(table.end, first, side="right")
    b_last = np.searchsorted(table.end, last, side="right")
    rank = _RANK_OF_CLASS[table.cls]
    # reduceat over [b_first[i], b_first[i+1]) covers every block of cell i except
    # possibly its last one, which may straddle into cell i+1; b_last adds it back.
    # Where b_first repeats, reduceat yields rank[b_first[i]], the cell's only block.
    best = np.maximum(np.maximum.reduceat(rank, b_first), rank[b_last])
    return _CLASS_OF_RANK[best]
