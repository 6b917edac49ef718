"""Applies a residency plan to a llama.cpp session with its real primitives.

Removing a middle range is `llama_memory_seq_rm` on its current positions followed by
`llama_memory_seq_add` shifting every later position down, which llama.cpp allows only
when `llama_memory_can_shift` is true (for Gemma 3: with swa_full). Ranges are removed
from the end of the cache backwards, so the positions of the ranges still to remove do
not move. Everything reported here was done and is therefore `observed`.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from effctx_core.contract import RangeAction
from effctx_core.residency import BlockClass, BlockTable


class RangeRemover(Protocol):
    """A llama session here or in the RPC host: both cut a range out of their cache."""

    def remove_range(self, start: int, end: int) -> float: ...


class LlamaResidencyExecutor:
    def __init__(self, session: RangeRemover):
        self.session = session

    def apply(self, current: BlockTable, planned: BlockTable, demoted: np.ndarray) -> list[RangeAction]:
        """Remove the demoted blocks (resident in `current`, not in `planned`)."""
        if not len(demoted):
            return []
        # contiguous runs of demoted blocks that are adjacent in the cache
        breaks = np.flatnonzero(np.diff(demoted) != 1) + 1
        runs = np.split(demoted, breaks)
        actions = []
        for run in reversed(runs):
            first, last = int(run[0]), int(run[-1])
            pos_start = int(current.position[first])
            pos_end = int(current.position[last] + current.sizes[last])
            ms = self.session.remove_range(pos_start, pos_end)
            cold = planned.cls[first] == BlockClass.COLD
            actions.append(RangeAction(
                action="park" if cold else "evict",
                start=int(current.start[first]),
                end=int(current.end[last]),
                pos_start=pos_start,
                pos_end=pos_end,
                shifted_from=pos_end,
                shift=pos_start - pos_end,
                ms=ms,
            ))
        return actions
